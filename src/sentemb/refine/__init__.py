"""Training-free refinements of sentence embeddings (RepAL and, as its baseline, whitening): one
file each, registering its class with `sentemb.registry.register_refinement` under the name of
its params sub-section `refine.<name>` (read through `sentemb.registry.REFINEMENTS`, which
imports every file), with its own figures (`Refinement.curves`).

What they share: `base` (the interface, the scopes), `config` (params section `refine`), `fit`
(fitting per scope: English and each Chinese set), `store` (saved fits, refused around another
model than the one they were fitted on) and `wrap` (the refined encoders the evaluators score).
"""
