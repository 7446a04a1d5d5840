"""Writing the report (`lbhash report`) from a directory's result tables alone.

- writer: `write_report`, the header (Setup) and "Agreement with the paper"
- context: what every section shares (ReportContext, markdown formatting)
- grid_view: grid.csv indexed by method, variant and bits
- grid_sections: the sections on grid.csv's runs (Table 2, curves, Fig. 5, Fig. 2, t-SNE)
- objective_study_section: the studies of the _D objective (study.csv)
- experiment_sections: bound, timing, centers, toy and baselines, each from its own table
"""

from lbhash.reproduce.report.writer import SECTIONS, write_report

__all__ = ["SECTIONS", "write_report"]
