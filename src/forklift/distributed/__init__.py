"""Data-parallel training on torch.distributed: the ranks of a run (`ranks`), batch norm over all of them
(`sync_batchnorm`), `forklift train --nproc` (`local_launch`) and `forklift run`, the launcher across hosts
(`launcher` and the modules it names)."""
