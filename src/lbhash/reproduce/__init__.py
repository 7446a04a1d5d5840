"""Reproduce the paper's experiments (`lbhash reproduce`) and report them (`lbhash report`).

Experiments are small declarative specs expanded into cells (training runs or measurements)
that a resumable runner executes in parallel processes; results go to tidy tables, from which
the report is written without retraining.
"""
