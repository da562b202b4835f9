"""Tenants: principals from a server-side tenants file, each with the Unix account its
work runs as and the ceiling the executor enforces whatever a request asks for.

One job per module: ``profile`` (what a tenant is), ``tenants_file`` (reading and
checking the TOML), ``accounts`` (the account database), ``secrets`` (the modes of
the daemon's own secrets), ``directory`` (the live table: credential -> principal,
reloaded on SIGHUP), ``ceiling`` (a request against the ceiling), ``shares`` (each
tenant's share of the daemon-wide limits), ``fsident`` (a
worker thread's file-system identity), ``seat`` (a session's principal).
"""

__all__: list[str] = []
