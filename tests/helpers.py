"""Shared test helpers: random codes with many tied distances, a few loss steps on digits,
shuffled training passes for memory-bank methods and the bank likelihood's plain formula,
cut copies of a run for resume tests, the CLI in process and its one-line errors, and
snapshots of folders that a refused command must leave alone, ValueErrors holding every fragment,
and image list files (`list:` data)."""

import re

import numpy as np
import pytest
from PIL import Image


def tied_codes(rng, n, bits, pool=8, flip=0.08):
    """Codes drawn from a small pool with a few flipped bits: many equal distances."""
    base = rng.choice(np.array([-1, 1], dtype=np.int8), size=(pool, bits))
    which = rng.integers(0, pool, n)
    codes = base[which]
    flips = rng.random((n, bits)) < flip
    return np.where(flips, -codes, codes).astype(np.int8), which


def labels_for(rng, which, classes, multilabel):
    """Labels that follow the pool index most of the time."""
    n = len(which)
    first = np.where(rng.random(n) < 0.7, which % classes, rng.integers(0, classes, n))
    if not multilabel:
        return first
    out = np.zeros((n, classes), dtype=np.uint8)
    out[np.arange(n), first] = 1
    extra = rng.random((n, classes)) < 0.15
    out |= extra.astype(np.uint8)
    out[rng.random(n) < 0.05] = 0  # some items without labels: nothing is relevant to them
    return out


def held_out(y, share=0.1) -> int:
    """Items the recommended profile holds out for validation: round(share * n) of each class's
    n items, at least one of a class with two or more."""
    counts = np.unique(y, return_counts=True)[1]
    return int(sum(max(1, round(share * n)) for n in counts if n >= 2))


class Killed(Exception):
    """Stands in for a process killed at the end of an epoch."""


def stop_before_the_first_epoch(monkeypatch) -> list:
    """A training stops (Killed) once its trainer is built, before the first epoch: a run has
    announced itself and written its first files by then. For tests of what a run prints,
    saves or resolves first, without training one; returns the list the stopped trainers go to."""
    import lbhash.train.fit as fit

    stopped = []

    def killed(trainer):
        stopped.append(trainer)
        raise Killed
    monkeypatch.setattr(fit, "train_to_end", killed)  # (the one driver's: in memory and into a directory)
    return stopped


def copies_at(copies):
    """An on_epoch_end that copies the run directory to copies[epoch] after that epoch: what a
    kill then leaves (the epoch's log line and checkpoint written, nothing after them), while
    the run trains on to its end. One training gives the finished run and its cut copies."""
    import shutil

    def copy(epoch, *record):
        if epoch in copies:
            root, dest = copies[epoch]
            shutil.copytree(root, dest)
    return copy


def assert_resume_matches(cfg, root, kill_at=2):
    """Train cfg uninterrupted, keeping a copy of the run as a kill after epoch kill_at leaves
    it (copies_at), then resume that copy (lbhash.runs.RunDirectory); assert both give the same
    codes and return the two run directories."""
    from lbhash.codes_file import load_codes_file
    from lbhash.runs import RunDirectory

    full, cut = root / "full", root / "cut"
    RunDirectory(full).train(cfg, on_epoch_end=copies_at({kill_at: (full, cut)}))
    assert not (cut / "codes.npz").exists() and (cut / "checkpoint.pt").is_file()
    RunDirectory(cut).resume()
    a, b = load_codes_file(full / "codes.npz"), load_codes_file(cut / "codes.npz")
    np.testing.assert_array_equal(a["db_codes"], b["db_codes"])
    np.testing.assert_array_equal(a["query_codes"], b["query_codes"])
    return full, cut


def digits_loss_steps(name, bits=16, steps=20, **kwargs):
    """Loss before and after `steps` full-batch Adam steps on 256 standardised digits."""
    import torch

    from lbhash.data import load_digits
    from lbhash.methods import create_method

    ds = load_digits()
    x = torch.from_numpy(ds.x[:256])
    x = (x - x.mean(0)) / (x.std(0) + 1e-6)
    y = torch.from_numpy(ds.labels[:256]).float()
    torch.manual_seed(0)
    head = torch.nn.Linear(64, bits)
    loss = create_method(name, bits=bits, num_classes=10, **kwargs)
    opt = torch.optim.Adam([*head.parameters(), *loss.parameters()], lr=1e-3)
    values = []
    for _ in range(steps + 1):
        value = loss(head(x), y, torch.arange(256)).total
        values.append(value.item())
        opt.zero_grad()
        value.backward()
        opt.step()
    return values[0], values[-1]


def digits_subset(n=256):
    """The first n digits, standardised, with one-hot float labels."""
    import torch

    from lbhash.data import load_digits

    ds = load_digits()
    x = torch.from_numpy(np.asarray(ds.x[:n], dtype=np.float32))
    x = (x - x.mean(0)) / (x.std(0) + 1e-6)
    return x, torch.from_numpy(np.asarray(ds.labels[:n], dtype=np.float32))


def train_passes(loss, head, x, labels, passes, batch=64, seed=0):
    """Adam steps over shuffled batches with the method's epoch hooks (bank methods: DCC and
    the like run at each pass's end); the mean loss of each pass."""
    import torch

    opt = torch.optim.Adam(head.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(seed)
    means = []
    for epoch in range(passes):
        loss.on_epoch_start(epoch)
        order, total = torch.randperm(len(x), generator=gen), 0.0
        for start in range(0, len(x), batch):
            index = order[start:start + batch]
            out = loss(head(x[index]), labels[index], index)
            opt.zero_grad()
            out.total.backward()
            opt.step()
            total += float(out.total.detach()) * len(index)
        loss.on_epoch_end(epoch)
        means.append(total / len(x))
    return means


def plain_bank_likelihood(u, labels, bank_u, bank_y):
    """The memory-bank likelihood as lbhash computed it before the fused pass (issue 31): plain
    autograd over batch x bank temporaries, the reference for lbhash.methods.bank_likelihood."""
    import torch

    theta = 0.5 * (u @ bank_u.to(u.dtype).T)
    s = ((labels.to(bank_y.dtype) @ bank_y.T) > 0).to(theta.dtype)
    # softplus: its gradient at theta = 0 is sigmoid(0) - s, as the fused pass's (the stable form
    # log1p(exp(-|theta|)) + max(theta, 0) takes the subgradient 1 - s there, and +/-1 codes meet 0 often)
    return (torch.nn.functional.softplus(theta) - s * theta).mean()


def bank_training(name, passes=3, n=240, bits=16, **constants):
    """A bank method and a small head trained together for `passes` shuffled passes (seed 0) on
    n synthetic items in 4 clusters, one in five with a second label and one in twenty with none;
    returns (the +/-1 codes of every item, the per-pass mean losses, the method)."""
    import torch

    from lbhash.methods import create_method

    gen = torch.Generator().manual_seed(0)
    classes, dim = 4, 12
    which = torch.randint(0, classes, (n,), generator=gen)
    x = 2.0 * torch.randn(classes, dim, generator=gen)[which] + torch.randn(n, dim, generator=gen)
    labels = torch.eye(classes)[which]
    labels[torch.arange(0, n, 5), (which[::5] + 1) % classes] = 1.0
    labels[torch.arange(3, n, 20)] = 0.0
    torch.manual_seed(0)
    loss = create_method(name, bits=bits, num_classes=classes, num_train=n, multi_label=True, **constants)
    head = torch.nn.Sequential(torch.nn.Linear(dim, 32), torch.nn.ReLU(), torch.nn.Linear(32, bits))
    means = train_passes(loss, head, x, labels, passes)
    with torch.no_grad():
        codes = torch.where(head(x) >= 0, 1, -1)
    return codes, means, loss


# a small, fast `lbhash train` on the digits set, for the CLI tests
FAST_TRAIN = ["--data", "digits", "--bits", "16", "--hidden", "64", "--centers", "hadamard", "--no-progress"]


def cli(*args):
    """`lbhash ARGS...` in process; paths and numbers are passed as strings."""
    from click.testing import CliRunner

    from lbhash.cli import main

    return CliRunner().invoke(main, [str(a) for a in args])


def one_line_error(result, *fragments):
    """A CLI result (helpers.cli) that failed with exit 2, no traceback and one line `error: ...`
    holding every fragment; returns that line (for checks on where a fragment sits in it)."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output, result.output
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def one_line_message(excinfo, *fragments):
    """An exception (pytest.raises' excinfo) whose message is one line holding every fragment;
    returns the message."""
    message = str(excinfo.value)
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def snapshot(root):
    """Every file and folder under root, with the SHA-256 of each file: 'nothing changed'."""
    import hashlib

    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


def flip_last_byte(path) -> None:
    """Tamper with a file as a disk or a hand might: its last byte's lowest bit flipped."""
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))


def npy_header_bytes(shape, dtype=np.float64) -> bytes:
    """An .npy header announcing `shape` with no data behind it: a huge array in a few bytes."""
    import io

    from numpy.lib import format as npy

    out = io.BytesIO()
    npy.write_array_header_1_0(out, {"descr": npy.dtype_to_descr(np.dtype(dtype)), "fortran_order": False,
                                     "shape": shape})
    return out.getvalue()


def npy_bytes(arr) -> bytes:
    import io

    out = io.BytesIO()
    np.save(out, arr)
    return out.getvalue()


def run_bounded(cmd, *, env, timeout=300, cwd=None):
    """Run cmd in its own process group; past `timeout` seconds kill the whole group (a
    multi-process run's ranks included, which subprocess.run's own timeout leaves alive) and
    fail with what it printed. Returns the CompletedProcess."""
    import os
    import signal
    import subprocess

    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        try:  # a process that left the group may still hold the pipes: do not wait on it for ever
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = "", "(its output pipes stayed open after the kill)"
        pytest.fail(f"{' '.join(map(str, cmd[:6]))} ... ran past {timeout} s and was killed; "
                    f"its last output:\n{(out or '')[-1500:]}\n{(err or '')[-3000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def fused_and_plain_bank_training(monkeypatch, method: str, **constants):
    """bank_training(method, **constants) with the fused bank likelihood, then with the plain
    formula patched in; returns both results and how many steps went through the plain formula."""
    import lbhash.methods.dbdh

    fused = bank_training(method, **constants)
    calls = []

    def plain(*args):
        calls.append(1)
        return plain_bank_likelihood(*args)

    monkeypatch.setattr(lbhash.methods.dbdh, "bank_likelihood", plain)
    return fused, bank_training(method, **constants), len(calls)


def write_cifar_small(tarball, path, train: int = 100, test: int = 20):
    """tools/cifar_small.py's image array (the first `train` and `test` JPEGs of each
    class of the CIFAR-10 tarball) written to `path`: what the README's and the pretrained
    backbone's checks train on."""
    import sys
    from pathlib import Path

    tools = str(Path(__file__).resolve().parents[1] / "tools")
    sys.path.insert(0, tools)
    try:
        from cifar_small import cifar_small
    finally:
        sys.path.remove(tools)
    np.savez(path, **cifar_small(str(tarball), train, test))


def cifar_jpeg_tree(tarball, out, train: int = 100, test: int = 20):
    """The first `train` training and `test` test JPEGs of each class of the CIFAR-10 tarball
    (PART/CLASS/NNNN.jpg, numbered in the archive's order), written under `out` by the names they
    have there: conftest's `cifar_sample`. One pass of lbhash.data.ustar's reader (tarfile takes
    seconds for the archive's 60,000 headers)."""
    from collections import Counter
    from pathlib import Path

    from lbhash.data.ustar import plain_members

    wanted, taken, out = {"train": train, "test": test}, Counter(), Path(out)
    found = plain_members(Path(tarball), lambda name: name.endswith(".jpg"))
    assert found is not None, f"{tarball}: not a tarball of plain members"
    for name, data in found:
        parts = name.split("/")
        if len(parts) >= 3 and taken[parts[-3], parts[-2]] < wanted.get(parts[-3], 0):
            taken[parts[-3], parts[-2]] += 1
            path = out.joinpath(*parts[-3:])
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    assert len(taken) == 20 and set(taken.values()) <= {train, test}, taken  # 10 classes, 2 parts
    return out


def colour_class_images(path, n_per_class=12, classes=4, test_per_class=3, seed=0):
    """Random images whose classes differ in colour, as an image-array file."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(classes), n_per_class)
    base = rng.integers(0, 256, (classes, 1, 1, 3))
    images = np.clip(base[labels] + rng.normal(0, 40, (len(labels), 32, 32, 3)), 0, 255).astype(np.uint8)
    is_test = np.tile(np.arange(n_per_class) < test_per_class, classes)
    np.savez(path, images=images, labels=labels, is_test=is_test)
    return path


def raises(*parts):
    """pytest.raises for a ValueError whose message holds every part, in any order."""
    return pytest.raises(ValueError, match="(?s)" + "".join(f"(?=.*{re.escape(str(p))})" for p in parts))


def write_image_lists(d, files, num_labels=10):
    """The `list:` format: for each file name, rows of (image path, set of label columns set to 1)."""
    d.mkdir(parents=True, exist_ok=True)
    for fname, rows in files.items():
        lines = [path + " " + " ".join("1" if k in labels else "0" for k in range(num_labels)) for path, labels in rows]
        (d / fname).write_text("\n".join(lines) + "\n")
    return d


def make_list_set(tmp_path, num_labels=3, labels=None):
    """Six 8x8 images under tmp_path/imgs/c0..c2 and train/test/database lists of them in tmp_path/lists."""
    imgs = tmp_path / "imgs"
    for k in range(6):
        (imgs / f"c{k % 3}").mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8), (40 * k, 0, 0)).save(imgs / f"c{k % 3}" / f"{k}.png")
    labels = labels or [{k % num_labels} for k in range(6)]
    rows = [(f"c{k % 3}/{k}.png", labels[k]) for k in range(6)]
    return write_image_lists(tmp_path / "lists", {"train.txt": rows[:2], "test.txt": rows[2:4],
                                                  "database.txt": rows[:2] + rows[4:]}, num_labels)


class InMemoryPhotos:
    """An image data set of photos held in a list (`image(i)` a copy), as a calibration reads one."""

    def __init__(self, images):
        self.images = images

    def image(self, i):
        return self.images[i].copy()


def pixel_embed(images):
    """A photo's pixels at a quarter of its side as its embedding (a stand-in for a backbone)."""
    return np.stack([np.asarray(img, np.float32)[::4, ::4].ravel() for img in images])
