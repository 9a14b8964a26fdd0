"""analysis layer of aitb (see ARCHITECTURE: layers)."""
