"""A KubeVirt, HyperConverged and node-maintenance simulator for the lab cluster."""
