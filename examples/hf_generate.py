#!/usr/bin/env python3
"""Greedy generation with a Hugging Face causal LM whose attention runs through attnkit, beside the same
model with PyTorch's SDPA.

The model is Qwen3-0.6B's real configuration (or Llama-3-8B's) cut to a few layers, with seeded random
weights. The SDPA side generates for each prompt alone (transformers' own KV cache); the attnkit side
serves all prompts by continuous batching: requests join at different steps (their prefill packed with
the others' decode tokens into one mixed batch), generate, and leave, their pages going to later ones.
The attnkit side is fed the SDPA side's greedy tokens (teacher forcing), so every one of the steps
compares the two on the same inputs: each request's next-token logits must agree within the dtype's
tolerance at every step, and the greedy tokens must be equal at every step but near ties, where SDPA's
two best logits are within twice the tolerance of each other (two results that each agree within the
tolerance may then pick either; with random weights and bfloat16 a few such steps occur). Exit status 1
when they do not agree.

    python examples/hf_generate.py                                  # CPU: backend cpu, float32
    python examples/hf_generate.py --device cuda --backend planned  # GPU: bfloat16
"""
import argparse
import copy
import inspect
import json
import sys
import time

import torch

# Real attention and model numbers (the published configs), with num_hidden_layers set by --layers.
CONFIGS = {
    "qwen3-0.6b": dict(model_type="qwen3", hidden_size=1024, intermediate_size=3072, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, vocab_size=151936, rms_norm_eps=1e-6,
                       rope_theta=1000000.0, max_position_embeddings=40960, tie_word_embeddings=True),
    "llama3-8b": dict(model_type="llama", hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                      num_key_value_heads=8, head_dim=128, vocab_size=128256, rms_norm_eps=1e-5,
                      rope_theta=500000.0, max_position_embeddings=8192, tie_word_embeddings=False),
}
# Max |logit difference| allowed at a step, by dtype: f32 differs by accumulation order only; bf16/f16
# round every layer's activations, so two correct attention paths part by a few units of 2^-8.
TOLERANCE = {torch.float32: 2e-3, torch.bfloat16: 1.5e-1, torch.float16: 5e-2}


def build_models(name, layers, dtype, device, seed):
    from transformers import AutoConfig, AutoModelForCausalLM

    values = dict(CONFIGS[name])
    config = AutoConfig.for_model(values.pop("model_type"), num_hidden_layers=layers, **values)
    torch.manual_seed(seed)
    sdpa = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=dtype).to(device).eval()
    import attnkit.hf

    attnkit.hf.register()
    # A config of its own: from_config records the attention implementation in the config.
    ours = AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation=attnkit.hf.ATTENTION_NAME,
                                            dtype=dtype)
    ours.load_state_dict(sdpa.state_dict())
    return sdpa, ours.to(device).eval()


@torch.no_grad()
def generate_sdpa(model, prompt, steps):
    """Greedy tokens and each step's next-token logits (float32 [vocab]), one prompt alone."""
    from transformers import DynamicCache

    try:
        cache = DynamicCache(config=model.config)
    except TypeError:  # releases before transformers 4.56 make it without the config
        cache = DynamicCache()
    # transformers 5 renames past_key_values to cache; older releases know only the first.
    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    ids = prompt[None]
    tokens, logits = [], []
    for _ in range(steps):
        step_logits = model(input_ids=ids, use_cache=True, **{cache_kw: cache}).logits[0, -1].float()
        logits.append(step_logits)
        tokens.append(int(step_logits.argmax()))
        ids = torch.tensor([[tokens[-1]]], device=prompt.device)
    return tokens, logits


@torch.no_grad()
def generate_attnkit(model, prompts, steps, joins, args, forced):
    """Continuous batching over one paged cache: request i joins at step joins[i] and leaves after
    `steps` tokens, its input at each step being forced[i]'s token of the step before. Returns per
    request its greedy tokens and logits, and the peak number of requests a step."""
    import attnkit.hf

    device = prompts[0].device
    cache = attnkit.hf.PagedKvCache.for_config(model.config, num_pages=args.num_pages, page_size=args.page_size,
                                               dtype=model.dtype, device=device, backend=args.backend)
    tokens = {i: [] for i in range(len(prompts))}
    logits = {i: [] for i in range(len(prompts))}
    running, step, peak, mixed_steps = [], 0, 0, 0
    while any(len(t) < steps for t in tokens.values()):
        running += [i for i, j in enumerate(joins) if j == step]
        new = {i: (prompts[i] if not tokens[i] else torch.tensor([forced[i][len(tokens[i]) - 1]], device=device))
               for i in running}
        positions = cache.schedule({i: len(t) for i, t in new.items()})
        peak = max(peak, len(running))
        mixed_steps += cache.batch.mode == "mixed"
        ids = torch.cat(list(new.values()))
        last = torch.cumsum(torch.tensor([len(t) for t in new.values()]), 0) - 1  # each request's last token
        with cache.step():
            out = model(input_ids=ids[None], position_ids=positions[None].to(device), use_cache=False,
                        logits_to_keep=last.to(device)).logits[0].float()
        for row, i in enumerate(running):
            logits[i].append(out[row])
            tokens[i].append(int(out[row].argmax()))
        for i in [i for i in running if len(tokens[i]) == steps]:
            running.remove(i)
            cache.release(i)
        step += 1
    return tokens, logits, dict(steps=step, peak_requests=peak, mixed_steps=mixed_steps,
                                backend=cache.backend.name, free_pages_after=cache.num_free_pages)


def run(args):
    dtype = getattr(torch, args.dtype)
    device = torch.device(args.device)
    sdpa, ours = build_models(args.model, args.layers, dtype, device, args.seed)
    g = torch.Generator().manual_seed(args.seed)
    lengths = [int(x) for x in args.prompt_lengths.split(",")]
    prompts = [torch.randint(0, sdpa.config.vocab_size, (n,), generator=g).to(device) for n in lengths]
    # Requests join one after another, every `--join-every` steps, so joins overlap others' decodes.
    joins = [i * args.join_every for i in range(len(prompts))]
    start = time.perf_counter()
    expected = [generate_sdpa(sdpa, p, args.steps) for p in prompts]
    sdpa_s = time.perf_counter() - start
    start = time.perf_counter()
    forced = [tokens for tokens, _ in expected]
    got_tokens, got_logits, stats = generate_attnkit(ours, prompts, args.steps, joins, args, forced)
    attnkit_s = time.perf_counter() - start
    tolerance = TOLERANCE[dtype]
    worst, first_token_mismatch, near_ties = 0.0, None, []
    for i, (want_tokens, want_logits) in enumerate(expected):
        for s in range(args.steps):
            worst = max(worst, float((got_logits[i][s] - want_logits[s]).abs().max()))
            if got_tokens[i][s] == want_tokens[s]:
                continue
            top2 = want_logits[s].topk(2).values
            if float(top2[0] - top2[1]) <= 2 * tolerance:
                near_ties.append(dict(request=i, step=s, margin=round(float(top2[0] - top2[1]), 4)))
            elif first_token_mismatch is None:
                first_token_mismatch = dict(request=i, step=s, attnkit=got_tokens[i][s], sdpa=want_tokens[s])
    result = dict(model=args.model, layers=args.layers, dtype=args.dtype, device=str(device), **stats,
                  prompts=lengths, joins=joins, tokens_per_request=args.steps, max_abs_logit_diff=worst,
                  tolerance=tolerance, greedy_tokens_equal=first_token_mismatch is None,
                  first_token_mismatch=first_token_mismatch, near_ties=near_ties,
                  sdpa_seconds=round(sdpa_s, 2), attnkit_seconds=round(attnkit_s, 2))
    result["ok"] = worst <= tolerance and first_token_mismatch is None
    return result


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=sorted(CONFIGS), default="qwen3-0.6b")
    p.add_argument("--layers", type=int, default=2, help="num_hidden_layers of the cut model (default 2)")
    p.add_argument("--steps", type=int, default=64, help="greedy tokens each request generates (default 64)")
    p.add_argument("--prompt-lengths", default="13,40,7,25", help="one prompt a request, of these lengths")
    p.add_argument("--join-every", type=int, default=5, help="steps between two requests' arrivals (default 5)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default=None, help="float32 (CPU default) or bfloat16 (CUDA default), float16")
    p.add_argument("--backend", default=None, help="attnkit backend (default: cpu on the CPU, planned on CUDA)")
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--num-pages", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="also write the result here")
    args = p.parse_args(argv)
    cuda = args.device.startswith("cuda")
    args.dtype = args.dtype or ("bfloat16" if cuda else "float32")
    args.backend = args.backend or ("planned" if cuda else "cpu")
    return args


def main(argv=None):
    args = parse_args(argv)
    result = run(args)
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    print("%s: %s, %d requests x %d tokens, max |logit diff| %.3g (tolerance %g), greedy tokens %s, %d near ties"
          % ("ok" if result["ok"] else "MISMATCH", result["backend"], len(result["prompts"]), args.steps,
             result["max_abs_logit_diff"], result["tolerance"], "equal" if result["greedy_tokens_equal"] else
             "differ at %s" % result["first_token_mismatch"], len(result["near_ties"])))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
