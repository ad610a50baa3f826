"""Reviewing results across revisions: what a pull request's reviewer runs.

Three commands, each a thin entry point:

    python -m sentemb.review.compare main HEAD      # paired tests, Markdown for the PR comment
    python -m sentemb.review.metrics_diff main      # every committed number, noise labelled
    python -m sentemb.review.leaderboard            # every experiment in one table

and what they share: `paired` (the paired tests and the one noise rule), `diff` (committed
numbers compared), `board` (the leaderboard's rows) and `render` (their Markdown). They read
results through `sentemb.results`.
"""
