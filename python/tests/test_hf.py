"""The Hugging Face client on the CPU: Qwen3-0.6B's config cut to 2 layers, random weights, greedy
generation through attnkit's cpu backend with continuous batching against transformers' SDPA."""
import importlib.util
import pathlib

import pytest

pytest.importorskip("transformers")
EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "hf_generate.py"


def load_example():
    spec = importlib.util.spec_from_file_location("hf_generate", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_greedy_generation_matches_sdpa_with_requests_joining_and_leaving():
    example = load_example()
    result = example.run(example.parse_args(["--steps", "16", "--join-every", "3", "--prompt-lengths", "13,40,7,25"]))
    assert result["greedy_tokens_equal"], result["first_token_mismatch"]
    assert result["max_abs_logit_diff"] <= result["tolerance"]
    assert result["mixed_steps"] >= 3 and result["peak_requests"] == 4
    assert result["free_pages_after"] == 128  # every request left and gave its pages back
