// PyTorch Distributed Checkpoint (DCP) directories, the format TorchTitan saves by default: recognised so
// that they are refused in one line naming the converter, not read. Reading them needs a Python pickle VM
// (.metadata pickles torch.distributed.checkpoint classes) and a torch.save zip archive per stored item,
// with its own pickle (docs/CHECKPOINTS.md, "TorchTitan checkpoints"); tools/dcp_to_hf.py converts one
// with torch's own reader into a Hugging Face model directory.
#pragma once

// 1 when DIR holds a file .metadata that starts as a pickle does (protocol 2 or later) and at least one
// *.distcp file; 0 otherwise (including DIR not being a readable directory).
int dcp_is_checkpoint_dir(const char *dir);
// Sets the error "DIR: a TorchTitan/PyTorch DCP checkpoint (...); convert it first: python3
// tools/dcp_to_hf.py DIR OUT --config CONFIG.json" and returns -1.
int dcp_refuse(const char *dir);
