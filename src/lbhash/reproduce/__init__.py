"""Reproduce the paper's experiments (`lbhash reproduce`) and report them (`lbhash report`).

Experiments are small declarative specs expanded into cells (training runs or measurements)
that a resumable runner executes in parallel processes; results go to tidy tables, from which
the report is written without retraining. The two sides meet only in those tables:

- experiments/: running the experiments (their specs, the registry, the tables they write)
- report/: writing the report from the tables
- shared by both: tables (names, columns, reading; tables_parse parses their cells), meta
  (meta.json), paper (the paper's published numbers), figures, stats, baselines_summary
  (baselines.csv as markdown and a figure)
- runner: the resumable cell runner the experiments (and benchmarks) train with
- toy: the MVB toy (`lbhash toy-mvb` and the toy experiment)
"""
