"""Reproduce the paper's experiments (`lbhash reproduce`) and report them (`lbhash report`).

Experiments are declarative specs expanded into cells that a resumable runner executes in
parallel; results go to tidy tables, from which the report is written without retraining. The
two sides (experiments/, report/) meet only in those tables; tables, meta, paper, figures,
stats and baselines_summary are shared, `runner` runs the cells and `toy` is the MVB toy.
"""
