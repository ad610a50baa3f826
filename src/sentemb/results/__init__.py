"""A run's results, read one way from wherever they are: the workspace, a revision (git, the
DVC cache or a remote) or a DVC experiment.

`revisions` finds the repository and the commit a name stands for, `readers` reads a
revision's files, and `runs` reads one experiment's results through them (else from git's copy
of the per-seed scores). Stage `summary` and the review commands (`sentemb.review`) read here.
"""
