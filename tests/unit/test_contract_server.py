"""Every method the server registers decodes the params type of the protocol contract
(wire/contract.py), and its handler declares that it takes those params (or what the
method's ``prepare`` makes of them) and returns the contract's result type."""

from __future__ import annotations

import inspect
from typing import Annotated, Any, TypeVar, get_args, get_origin, get_type_hints

import pytest

from execserver.kernel import MethodSpec, MethodTable, RequestContext
from execserver.server.runner import build_method_table
from execserver.wire import contract
from execserver.wire import methods as m
from execserver.wire.base import Empty
from execserver.wire.contract import EncodesAs
from execserver.wire.fs import FileMetadata, GetMetadataParams, ReadBlockParams, ReadFileParams


def _first_param_hint(func: Any) -> Any:
    hints = get_type_hints(func, include_extras=True)
    names = list(inspect.signature(func).parameters)
    return hints[names[0]], hints["return"]


def _handler_hints(func: Any) -> tuple[Any, Any]:
    hints = get_type_hints(func, include_extras=True)
    names = list(inspect.signature(func).parameters)
    assert len(names) == 2, f"{func.__qualname__} must take (ctx, params)"
    assert hints[names[0]] is RequestContext, f"{func.__qualname__}: first argument"
    return hints[names[1]], hints["return"]


def _bound_members(var: TypeVar) -> set[str]:
    bound = var.__bound__
    return {name for name in vars(bound) if not name.startswith("_")} if bound else set()


def _prepared_type(spec: MethodSpec[Any], params_type: type) -> tuple[Any, list[str]]:
    """What the handler should receive: the params type, or prepare's result for it."""
    prepare = spec.decoder.prepare
    if prepare is None:
        return params_type, []
    takes, gives = _first_param_hint(prepare)
    if isinstance(takes, TypeVar):
        fields = set(getattr(params_type, "__struct_fields__", ()))
        missing = _bound_members(takes) - fields
        problems = (
            [f"{spec.name}: {params_type.__name__} lacks {sorted(missing)}"] if missing else []
        )
        return (
            gives[params_type] if takes in getattr(gives, "__parameters__", ()) else gives
        ), problems
    if takes is not params_type:
        return gives, [f"{spec.name}: prepare takes {takes!r}, the contract says {params_type!r}"]
    return gives, []


def _result_matches(declared: Any, result_type: type) -> bool:
    if declared is result_type:
        return True
    if get_origin(declared) is Annotated:
        marks = get_args(declared)[1:]
        return any(isinstance(mark, EncodesAs) and mark.type is result_type for mark in marks)
    return False


def contract_mismatches(table: MethodTable) -> list[str]:
    problems: list[str] = []
    for name, spec in table.methods.items():
        if name not in contract.REQUESTS:
            problems.append(f"{name}: not in the contract")
            continue
        params_type, result_type = contract.REQUESTS[name]
        if spec.decoder.type is not params_type:
            problems.append(
                f"{name}: decodes {spec.decoder.type!r}, the contract says {params_type!r}"
            )
        expected, found = _prepared_type(spec, params_type)
        problems += found
        takes, gives = _handler_hints(spec.handler)
        if takes != expected:
            problems.append(f"{name}: handler takes {takes!r}, it is given {expected!r}")
        if not _result_matches(gives, result_type):
            problems.append(f"{name}: handler returns {gives!r}, the contract says {result_type!r}")
    return problems


def test_every_registered_method_matches_the_contract() -> None:
    assert contract_mismatches(build_method_table()) == []


def test_every_contract_method_is_registered() -> None:
    assert set(build_method_table().methods) == set(contract.REQUESTS)


# ---- the check catches what it is for --------------------------------------------------
# The handlers below are never called: the check reads only their annotations.


async def _metadata(ctx: RequestContext, params: GetMetadataParams) -> FileMetadata:
    raise NotImplementedError


async def _wrong_params(ctx: RequestContext, params: ReadBlockParams) -> FileMetadata:
    raise NotImplementedError


async def _wrong_result(ctx: RequestContext, params: GetMetadataParams) -> Empty:
    raise NotImplementedError


async def _dict_result(
    ctx: RequestContext, params: GetMetadataParams
) -> Annotated[dict[str, Any], EncodesAs(FileMetadata)]:
    raise NotImplementedError


async def _wrongly_marked(
    ctx: RequestContext, params: GetMetadataParams
) -> Annotated[dict[str, Any], EncodesAs(Empty)]:
    raise NotImplementedError


def _prepare_other(params: ReadFileParams) -> ReadFileParams:
    return params


def _one(handler: Any, **kwargs: Any) -> list[str]:
    table = MethodTable()
    table.add(m.FS_GET_METADATA, handler, family="filesystem", **kwargs)
    return contract_mismatches(table)


def test_a_matching_handler_passes() -> None:
    assert _one(_metadata) == []
    assert _one(_dict_result) == []


@pytest.mark.parametrize(
    ("handler", "kwargs", "complaint"),
    [
        (_wrong_params, {}, "handler takes"),
        (_wrong_result, {}, "handler returns"),
        (_wrongly_marked, {}, "handler returns"),
        (_metadata, {"prepare": _prepare_other}, "prepare takes"),
    ],
)
def test_a_mismatch_is_reported(handler: Any, kwargs: dict[str, Any], complaint: str) -> None:
    problems = _one(handler, **kwargs)
    assert len(problems) >= 1 and any(complaint in p for p in problems), problems


def test_a_method_outside_the_contract_is_reported() -> None:
    table = MethodTable()
    table.add("test/extra", _metadata, family="test", params_type=GetMetadataParams)
    assert contract_mismatches(table) == ["test/extra: not in the contract"]


def test_add_takes_the_params_type_from_the_contract() -> None:
    table = MethodTable()
    with pytest.raises(ValueError, match="comes from the contract"):
        table.add(m.FS_GET_METADATA, _metadata, family="filesystem", params_type=ReadBlockParams)
    with pytest.raises(ValueError, match="not in the contract"):
        table.add("test/extra", _metadata, family="test")
    table.add(m.FS_GET_METADATA, _metadata, family="filesystem")
    assert table.methods[m.FS_GET_METADATA].decoder.type is GetMetadataParams


async def _read_block(ctx: RequestContext, params: ReadBlockParams) -> Empty:
    raise NotImplementedError


def test_a_generic_prepare_must_fit_the_contract_params() -> None:
    from execserver.fs.requests import check_path

    table = MethodTable()
    # The mismatch is what this test hands the checker, so mypy sees it too.
    table.add(m.FS_READ_BLOCK, _read_block, family="filesystem", prepare=check_path)  # type: ignore[misc]
    problems = contract_mismatches(table)
    assert any("ReadBlockParams lacks ['path', 'sandbox']" in p for p in problems), problems
