#!/usr/bin/env python3
"""Convert a TorchTitan (PyTorch DCP) checkpoint of a Qwen3 model into a Hugging Face model directory that
portatrain (and transformers) load: model.safetensors with HF tensor names, config.json, tokenizer files.

  python3 tools/dcp_to_hf.py DCP_DIR OUT_DIR --config CONFIG.json [--tokenizer DIR]

DCP_DIR is one TorchTitan checkpoint step (e.g. OUT/checkpoint/step-3: `.metadata` + `__0_0.distcp` ...).
It is read with torch's own torch.distributed.checkpoint (no process group needed), the model weights only:
the optimizer state, the lr scheduler, the data loader position and the step are not converted, so a run
started from OUT_DIR continues from TorchTitan's weights, not from its optimizer. CONFIG.json is the HF config
of the model TorchTitan trained (its --hf-assets-path holds it; tools/torchtitan_run.py links it as
OUT/assets/config.json); it is copied to OUT_DIR/config.json and its shapes are checked against the weights.
Tokenizer files (tokenizer.json, tokenizer_config.json) are copied from --tokenizer, else from the config's
directory when they are there.

Names: TorchTitan's Qwen3 names map one to one onto HF's (the same renaming as TorchTitan's own
Qwen3StateDictAdapter.to_hf, which writes its --checkpoint.last-save-in-hf export; no tensor is permuted).
A tied model (tie_word_embeddings) stores lm_head.weight in DCP as the embedding itself: it is checked to be
equal and left out, as TorchTitan's HF export and transformers' save_pretrained leave it out. The dtype is the
stored one (TorchTitan saves fp32 parameters unless told otherwise).

Needs torch and safetensors (e.g. /work/venv-tt/bin/python). Exit status: 0, 1 on any error (one line).
"""
import argparse
import json
import os
import re
import shutil
import sys

# TorchTitan Qwen3 name -> HF name ("{}": the layer number).
TT_TO_HF = {
    "tok_embeddings.weight": "model.embed_tokens.weight",
    "layers.{}.attention.qkv_linear.wq.weight": "model.layers.{}.self_attn.q_proj.weight",
    "layers.{}.attention.qkv_linear.wk.weight": "model.layers.{}.self_attn.k_proj.weight",
    "layers.{}.attention.qkv_linear.wv.weight": "model.layers.{}.self_attn.v_proj.weight",
    "layers.{}.attention.wo.weight": "model.layers.{}.self_attn.o_proj.weight",
    "layers.{}.attention.q_norm.weight": "model.layers.{}.self_attn.q_norm.weight",
    "layers.{}.attention.k_norm.weight": "model.layers.{}.self_attn.k_norm.weight",
    "layers.{}.feed_forward.w1.weight": "model.layers.{}.mlp.gate_proj.weight",
    "layers.{}.feed_forward.w3.weight": "model.layers.{}.mlp.up_proj.weight",
    "layers.{}.feed_forward.w2.weight": "model.layers.{}.mlp.down_proj.weight",
    "layers.{}.attention_norm.weight": "model.layers.{}.input_layernorm.weight",
    "layers.{}.ffn_norm.weight": "model.layers.{}.post_attention_layernorm.weight",
    "norm.weight": "model.norm.weight",
    "lm_head.weight": "lm_head.weight",
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")


class ConvertError(Exception):
    pass


def hf_name(tt):
    """The HF name of a TorchTitan model key, or None for a key that is not a model weight."""
    m = re.match(r"^layers\.(\d+)\.(.*)$", tt)
    key, layer = (f"layers.{{}}.{m.group(2)}", m.group(1)) if m else (tt, None)
    name = TT_TO_HF.get(key)
    return name.format(layer) if name and layer is not None else name


def expected_shapes(c):
    """HF name -> shape, from the config (what portatrain's loader checks too)."""
    d, hd, V, F = c["hidden_size"], c["head_dim"], c["vocab_size"], c["intermediate_size"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    s = {"model.embed_tokens.weight": (V, d), "model.norm.weight": (d,)}
    if not c.get("tie_word_embeddings", False):
        s["lm_head.weight"] = (V, d)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        s.update({p + "self_attn.q_proj.weight": (q, d), p + "self_attn.k_proj.weight": (kv, d),
                  p + "self_attn.v_proj.weight": (kv, d), p + "self_attn.o_proj.weight": (d, q),
                  p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,),
                  p + "mlp.gate_proj.weight": (F, d), p + "mlp.up_proj.weight": (F, d),
                  p + "mlp.down_proj.weight": (d, F), p + "input_layernorm.weight": (d,),
                  p + "post_attention_layernorm.weight": (d,)})
    return s


def read_dcp_model(dcp_dir):
    """The model weights of a DCP checkpoint, by TorchTitan name, read with torch.distributed.checkpoint."""
    import warnings
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    # a single process reading is what is meant here; torch warns that no process group is set up
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    if not os.path.isfile(os.path.join(dcp_dir, ".metadata")):
        raise ConvertError(f"{dcp_dir}: not a DCP checkpoint (no .metadata)")
    reader = dcp.FileSystemReader(dcp_dir)
    md = reader.read_metadata()
    sd = {}
    for k, v in md.state_dict_metadata.items():
        if isinstance(v, TensorStorageMetadata) and hf_name(k) is not None:
            sd[k] = torch.empty(tuple(v.size), dtype=v.properties.dtype)
    if not sd:
        raise ConvertError(f"{dcp_dir}/.metadata: no TorchTitan Qwen3 model weights (tok_embeddings.weight, "
                           "layers.N....) in this checkpoint")
    dcp.load(sd, storage_reader=reader, no_dist=True)
    return sd


def convert(dcp_dir, out_dir, config_path, tokenizer_dir):
    import torch
    from safetensors.torch import save_file
    try:
        with open(config_path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise ConvertError(f"{config_path}: cannot read the model config: {e}")
    for k in ("hidden_size", "head_dim", "vocab_size", "intermediate_size", "num_attention_heads",
              "num_key_value_heads", "num_hidden_layers"):
        if not isinstance(cfg.get(k), int):
            raise ConvertError(f"{config_path}: \"{k}\" missing or not an integer")
    tt = read_dcp_model(dcp_dir)
    tied = bool(cfg.get("tie_word_embeddings", False))
    hf = {hf_name(k): v.contiguous() for k, v in tt.items()}
    if tied and "lm_head.weight" in hf:
        emb = hf.get("model.embed_tokens.weight")
        if emb is None or not torch.equal(hf["lm_head.weight"], emb):
            raise ConvertError(f"{dcp_dir}: lm_head.weight differs from tok_embeddings.weight but {config_path} "
                               "has tie_word_embeddings true")
        del hf["lm_head.weight"]
    want = expected_shapes(cfg)
    for name, shape in want.items():
        if name not in hf:
            raise ConvertError(f"{dcp_dir}: no weight for {name} (the config {config_path} has it)")
        if tuple(hf[name].shape) != shape:
            raise ConvertError(f"{dcp_dir}: {name} has shape {list(hf[name].shape)} but {config_path} implies "
                               f"{list(shape)}")
    extra = sorted(set(hf) - set(want))
    if extra:
        raise ConvertError(f"{dcp_dir}: weights the config {config_path} has no place for: {', '.join(extra[:4])}")
    os.makedirs(out_dir, exist_ok=True)
    tmp = os.path.join(out_dir, "model.safetensors.tmp")
    save_file(hf, tmp, metadata={"format": "pt"})
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # safetensors creates it 0600; a model dir is shared like any output
    os.replace(tmp, os.path.join(out_dir, "model.safetensors"))
    shutil.copyfile(config_path, os.path.join(out_dir, "config.json"))
    src = tokenizer_dir or os.path.dirname(os.path.abspath(config_path))
    copied = [n for n in TOKENIZER_FILES if os.path.isfile(os.path.join(src, n))]
    for n in copied:
        shutil.copyfile(os.path.join(src, n), os.path.join(out_dir, n))
    if tokenizer_dir and "tokenizer.json" not in copied:
        raise ConvertError(f"{tokenizer_dir}: no tokenizer.json")
    n = sum(v.numel() for v in hf.values())
    print(f"dcp_to_hf: {dcp_dir} -> {out_dir}: {len(hf)} tensors, {n} parameters"
          f"{' (tied head left out)' if tied else ''}, config.json{', ' + ', '.join(copied) if copied else ''}; "
          "weights only (no optimizer state)", file=sys.stderr)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dcp_dir", help="a TorchTitan checkpoint step directory (.metadata + *.distcp)")
    p.add_argument("out_dir", help="the HF model directory to write")
    p.add_argument("--config", required=True, help="the model's HF config.json (TorchTitan's hf_assets_path)")
    p.add_argument("--tokenizer", help="dir with tokenizer.json (default: the config's directory, if there)")
    a = p.parse_args(argv)
    try:
        convert(a.dcp_dir, a.out_dir, a.config, a.tokenizer)
    except ConvertError as e:
        print(f"dcp_to_hf: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
