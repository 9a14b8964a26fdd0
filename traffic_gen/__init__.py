"""traffic_gen, a middle package of aitb (layers: the import contracts in pyproject.toml):
agents and a controller that replay a Schedule over real sockets between emulated hosts. Entry
point: :func:`replay`."""

from traffic_gen.replay import ReplayOptions, ReplayResult, replay

__all__ = ["replay", "ReplayOptions", "ReplayResult"]
