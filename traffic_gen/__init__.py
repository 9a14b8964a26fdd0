"""traffic_gen layer of aitb (see ARCHITECTURE: layers)."""
