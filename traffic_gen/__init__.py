"""traffic_gen layer of aitb (see ARCHITECTURE: layers): agents and a controller that replay a
Schedule over real sockets between emulated hosts. Entry point: :func:`replay`."""

from traffic_gen.replay import ReplayOptions, ReplayResult, replay

__all__ = ["replay", "ReplayOptions", "ReplayResult"]
