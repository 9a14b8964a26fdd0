"""topologies layer of aitb (see ARCHITECTURE: layers)."""
