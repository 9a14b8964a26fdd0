"""Capacity planning: what one machine can emulate at fidelity (measured by ``aitb calibrate``,
:mod:`.measure`), what a lab asks of it (:mod:`.model`), and where to cut a lab that needs more
than one machine (:mod:`.cut`)."""
