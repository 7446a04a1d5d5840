"""Writing the report (`lbhash report`) from a directory's result tables alone: `writer`
(`write_report`), `context` (what every section shares, and the grid view), `grid_sections` and
`experiment_sections`.
"""

from lbhash.reproduce.report.writer import SECTIONS, write_report

__all__ = ["SECTIONS", "write_report"]
