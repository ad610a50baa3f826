"""Training methods: one file each, registering its class with `sentemb.registry.register_method`
(read through `sentemb.registry.METHODS`, which imports every file); `base` holds the interface and
their composition, `functional` the maths they share."""
