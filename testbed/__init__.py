"""testbed layer of aitb (see ARCHITECTURE: layers)."""
