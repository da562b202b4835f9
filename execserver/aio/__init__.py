"""Small asyncio building blocks every part of the package uses: owned task sets
(``tasks.TaskSet``) and eager first steps (``eager.start_eagerly``).

It imports nothing of execserver, so the daemon and the client side may both use it.
"""

__all__: list[str] = []
