"""workloads layer of aitb (see ARCHITECTURE: layers)."""
