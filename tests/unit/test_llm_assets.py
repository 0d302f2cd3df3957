"""The model folder written for serving random weights, and site paths."""
import json
import random

import pytest

from hpcai.errors import UsageError
from hpcai.workloads import llm_assets


def test_llama3_8b_fields_match_litgpt():
    from litgpt.config import Config

    litgpt = Config.from_name("Llama-3-8B")
    for key, value in llm_assets.LLAMA3_8B.items():
        assert getattr(litgpt, key) == value, key


def test_hf_config_of_llama3_8b_is_meta_s():
    cfg = llm_assets.hf_llama_config(llm_assets.LLAMA3_8B)
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"],
            cfg["num_key_value_heads"], cfg["intermediate_size"]) == (4096, 32, 32, 8, 14336)
    assert cfg["vocab_size"] == 128256 and cfg["max_position_embeddings"] == 8192
    assert cfg["rope_theta"] == 500000.0
    assert (cfg["bos_token_id"], cfg["eos_token_id"]) == (128000, 128001)  # as Meta's


def test_dummy_model_folder_loads_with_transformers(tmp_path):
    """SGLang reads the folder with transformers' AutoConfig and AutoTokenizer."""
    from transformers import AutoConfig, AutoTokenizer

    cfg = llm_assets.TINY_LLAMA
    folder = llm_assets.write_dummy_model(tmp_path / "model", cfg)
    config = AutoConfig.from_pretrained(folder)
    assert config.model_type == "llama" and config.num_hidden_layers == 2
    assert config.vocab_size == cfg["padded_vocab_size"]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert len(tokenizer) == cfg["padded_vocab_size"]
    assert tokenizer.bos_token_id == cfg["vocab_size"] and tokenizer.eos_token_id == cfg["vocab_size"] + 1
    # Any ids decode to text that encodes back to the same ids: prompt lengths stay exact.
    rng = random.Random(1)
    ids = [rng.randrange(cfg["vocab_size"]) for _ in range(200)]
    text = tokenizer.decode(ids)
    assert tokenizer(text, add_special_tokens=False)["input_ids"] == ids
    # Ids the random model may emit above the regular vocabulary still decode.
    assert tokenizer.decode([cfg["padded_vocab_size"] - 1], skip_special_tokens=True) == ""


def test_full_size_tokenizer_covers_llama3_vocabulary(tmp_path):
    from tokenizers import Tokenizer

    llm_assets.write_word_tokenizer(tmp_path, llm_assets.LLAMA3_8B)
    tokenizer = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert tokenizer.get_vocab_size() == 128256
    assert tokenizer.token_to_id("<|begin_of_text|>") == 128000
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["model_max_length"] == 8192


def test_site_paths_resolve_as_given_then_under_the_site_folder(tmp_path, monkeypatch):
    (tmp_path / "site" / "corpus").mkdir(parents=True)
    monkeypatch.setenv(llm_assets.DATA_DIR_ENV, str(tmp_path / "site"))
    found = llm_assets.resolve_site_path("corpus", llm_assets.DATA_DIR_ENV, "data folder", "--data")
    assert found == (tmp_path / "site" / "corpus").resolve()
    assert llm_assets.resolve_site_path(str(tmp_path / "site"), llm_assets.DATA_DIR_ENV,
                                        "data folder", "--data") == (tmp_path / "site").resolve()
    with pytest.raises(UsageError) as err:
        llm_assets.resolve_site_path("missing", llm_assets.DATA_DIR_ENV, "data folder", "--data")
    assert "missing" in err.value.one_line() and "site" in err.value.one_line()


def test_missing_path_without_site_folder_names_the_variable(monkeypatch):
    monkeypatch.delenv(llm_assets.MODELS_DIR_ENV, raising=False)
    with pytest.raises(UsageError) as err:
        llm_assets.resolve_site_path("Meta-Llama-3-8B", llm_assets.MODELS_DIR_ENV,
                                     "model folder", "--weights")
    assert "HPCAI_MODELS_DIR" in err.value.one_line()
    assert "\n" not in err.value.one_line()
