"""The model's name in `kvedge budget` and `kvedge plan` comes from the file or the config (_name_or_path, then
model_type, then the file's own name), never from the folder holding it (issue 15 item 4: a config kept in
`configs/` was called "configs")."""
import json
import os

import pytest

from kvedge_host import cli

SHAPE = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 64,
         "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 128}


def write(folder, fname, **extra):
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, fname)
    with open(path, "w") as f:
        json.dump(dict(SHAPE, **extra), f)
    return path


def budget_model(capsys, path):
    rc = cli.main(["budget", "--model", path, "--heap", "10000000", "--context", "64", "--json"])
    out = capsys.readouterr().out
    assert rc == 0, out
    return json.loads(out)["model"]


def plan_model(capsys, path, tmp_path):
    out_file = str(tmp_path / "plan.json")
    rc = cli.main(["plan", "--model", path, "--heap", "10000000", "--context", "64", "--out", out_file])
    text = capsys.readouterr().out
    assert rc == 0, text
    with open(out_file) as f:
        return json.load(f)["model"], text


CASES = [
    # (file name, extra config keys, expected name)
    ("qwen2.5-0.5b.json", {"model_type": "qwen2", "_name_or_path": "Qwen/Qwen2.5-0.5B"}, "Qwen/Qwen2.5-0.5B"),
    ("qwen2.5-0.5b.json", {"model_type": "qwen2"}, "qwen2"),
    ("qwen2.5-0.5b.json", {}, "qwen2.5-0.5b"),
    ("config.json", {}, "config"),
    ("tiny.json", {"_name_or_path": "", "model_type": "llama"}, "llama"),
]


@pytest.mark.parametrize("fname,extra,expected", CASES)
def test_budget_and_plan_name_the_model_not_the_folder(capsys, tmp_path, fname, extra, expected):
    path = write(str(tmp_path / "configs"), fname, **extra)
    assert budget_model(capsys, path) == expected
    name, text = plan_model(capsys, path, tmp_path)
    assert name == expected
    assert "configs" not in text


def test_a_folder_given_as_model_is_named_by_its_config(capsys, tmp_path):
    folder = str(tmp_path / "configs")
    write(folder, "config.json", model_type="qwen2")
    assert budget_model(capsys, folder) == "qwen2"
    write(folder, "config.json")
    assert budget_model(capsys, folder) == "config"


def test_multimodal_wrapper_keeps_the_outer_name(capsys, tmp_path):
    path = str(tmp_path / "configs" / "gemma.json")
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as f:
        json.dump({"_name_or_path": "google/gemma-3-4b-it", "model_type": "gemma3",
                   "text_config": dict(SHAPE, model_type="gemma3_text")}, f)
    assert budget_model(capsys, path) == "google/gemma-3-4b-it"
