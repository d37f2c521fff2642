"""Reading the world: the Kubernetes API and Prometheus, turned into the values `decide` takes."""
