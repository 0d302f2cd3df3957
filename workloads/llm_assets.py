"""What the LLM workloads need besides a framework: the site's data and model
folders, and a model folder (config + tokenizer) for serving random weights.

SGLang's `--load-format dummy` draws random weights but still reads the
model folder's `config.json`, and its server and benchmark client load the
tokenizer from there. Both are written here, so a dummy-weights run needs no
download. Imports no framework: `tokenizers` is imported when a tokenizer is
written.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from hpcai.errors import UsageError

DATA_DIR_ENV = "HPCAI_DATA_DIR"
MODELS_DIR_ENV = "HPCAI_MODELS_DIR"

# LitGPT's "Llama-3-8B" (litgpt/config.py), in LitGPT's field names. Kept here
# so the serving image needs no LitGPT; a unit test checks it against LitGPT.
LLAMA3_8B = {
    "name": "Llama-3-8B", "block_size": 8192, "vocab_size": 128000, "padded_vocab_size": 128256,
    "n_layer": 32, "n_embd": 4096, "n_head": 32, "n_query_groups": 8,
    "intermediate_size": 14336, "rope_base": 500000, "norm_eps": 1e-5,
}
# The same architecture shrunk to two layers: for tests, and a quick GPU check.
TINY_LLAMA = {**LLAMA3_8B, "name": "tiny-llama-2l", "block_size": 256, "vocab_size": 480,
              "padded_vocab_size": 512, "n_layer": 2, "n_embd": 128, "n_head": 4,
              "n_query_groups": 2, "intermediate_size": 344}
SERVE_MODELS = {c["name"]: c for c in (LLAMA3_8B, TINY_LLAMA)}


def resolve_site_path(value: str, env_var: str, what: str, option: str) -> Path:
    """An existing path as given, else under the site folder named by env_var."""
    path = Path(value).expanduser()
    candidates = [path]
    base = os.environ.get(env_var)
    if not path.is_absolute() and base:
        candidates.append(Path(base).expanduser() / path)
    for candidate in candidates:
        if candidate.exists():
            return candidate.resolve()
    looked = ", ".join(str(c) for c in candidates)
    hint = (f"pass {option} an existing folder" +
            ("" if base else f", or set {env_var} to the site's folder and name one inside it"))
    raise UsageError(f"{what} {value!r} not found (looked in {looked})", hint)


def hf_llama_config(cfg: dict) -> dict:
    """A Hugging Face `config.json` (LlamaForCausalLM) from LitGPT-style fields."""
    bos, eos = special_token_ids(cfg)
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": cfg["n_embd"],
        "intermediate_size": cfg["intermediate_size"],
        "num_hidden_layers": cfg["n_layer"],
        "num_attention_heads": cfg["n_head"],
        "num_key_value_heads": cfg["n_query_groups"],
        "vocab_size": cfg["padded_vocab_size"],
        "max_position_embeddings": cfg["block_size"],
        "rope_theta": float(cfg["rope_base"]),
        "rms_norm_eps": cfg["norm_eps"],
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "attention_bias": False,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": "bfloat16",
        # As in Meta's Llama-3-8B config.json. Without it, transformers 5.x (SGLang
        # 0.5.19 pins 5.12.1) takes the folder for a Mistral one and warns of
        # "incorrect tokenization" (tokenization_utils_tokenizers.py:1315-1374).
        "transformers_version": "4.40.0.dev0",
    }


def special_token_ids(cfg: dict) -> tuple[int, int]:
    """Beginning and end of text sit just above the regular vocabulary, as in
    Llama 3 (128000 and 128001)."""
    return cfg["vocab_size"], cfg["vocab_size"] + 1


def write_word_tokenizer(folder: Path, cfg: dict) -> None:
    """A tokenizer with one entry per id of the model's (padded) vocabulary:
    regular ids are words `t<id>` split on whitespace, so any id sequence
    decodes to text that encodes back to the same ids, and prompt lengths
    stay exact; ids above the vocabulary are Llama 3's special tokens. With
    random weights only the ids matter, not what they mean."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

    regular, padded = cfg["vocab_size"], cfg["padded_vocab_size"]
    if padded < regular + 2:
        raise UsageError(f"padded vocabulary {padded} leaves no room for special tokens",
                         f"use a padded_vocab_size of at least {regular + 2}")
    specials = ["<|begin_of_text|>", "<|end_of_text|>"] + [
        f"<|reserved_special_token_{i}|>" for i in range(padded - regular - 2)]
    vocab = {f"t{i}": i for i in range(regular)}
    vocab.update({name: regular + i for i, name in enumerate(specials)})
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=specials[-1]))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens([AddedToken(s, special=True) for s in specials])
    tokenizer.save(str(folder / "tokenizer.json"))
    _write_json(folder / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": specials[0], "eos_token": specials[1], "unk_token": specials[-1],
        "model_max_length": cfg["block_size"], "clean_up_tokenization_spaces": False,
    })
    _write_json(folder / "special_tokens_map.json", {
        "bos_token": specials[0], "eos_token": specials[1], "unk_token": specials[-1]})


def write_dummy_model(folder: Path, cfg: dict) -> Path:
    """The folder SGLang serves with `--load-format dummy`: config and tokenizer."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = hf_llama_config(cfg)
    _write_json(folder / "config.json", config)
    _write_json(folder / "generation_config.json", {
        "bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"]})
    write_word_tokenizer(folder, cfg)
    return folder


def _write_json(path: Path, doc: dict) -> None:
    path.write_text(json.dumps(doc, indent=2) + "\n")
