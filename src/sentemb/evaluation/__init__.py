"""Evaluation suites: one file and evaluator each, registered with
`sentemb.registry.register_suite` (read through `sentemb.registry.SUITES`, which imports every
file); `base` holds what they share, `encoders` loads the encoders they score."""
