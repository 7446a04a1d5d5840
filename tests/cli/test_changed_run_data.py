"""Issue 89, the first hour: an index of a run whose folder grew (or shrank) since it trained is refused in
one line that says what it found, before any encoding; the ids are positions in the run's data, so the
index would otherwise give items other items' embeddings."""

from helpers import cli


def test_a_run_whose_folder_changed_is_not_indexed_silently(tiny_image_run, tmp_path, monkeypatch):
    from lbhash.runs import run_files

    _, run = tiny_image_run
    real = run_files.read_data_summary(run)
    for recorded, words in ((real["items"] - 3, "3 more than the"), (real["items"] + 2, "2 fewer than the")):
        # the run as though it had trained on another number of items: the folder as it is now differs
        monkeypatch.setattr(run_files, "read_data_summary", lambda run_dir, n=recorded: {**real, "items": n})
        for part in ("all", "database"):
            result = cli("index", "build", run, "--out", tmp_path / f"idx-{part}", "--part", part)
            assert result.exit_code == 2, result.output
            line = result.output.strip()
            assert "\n" not in line and f"now holds {real['items']} items, {words} {recorded} it trained on" in line
            assert "lbhash index add" in line and not (tmp_path / f"idx-{part}").exists()
    monkeypatch.undo()  # the folder as the run recorded it: indexed
    assert cli("index", "build", run, "--out", tmp_path / "idx", "--part", "database").exit_code == 0
