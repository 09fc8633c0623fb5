"""specfleet lab: an emulated Jetson fleet (containers, namespaces, LAN registry) on one host."""
