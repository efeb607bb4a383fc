"""Starting training as ranks: `forklift run` across hosts over ssh (`job`: probe, check, lay out, print, run and
supervise; `commands`: torchrun lines and the same job for Slurm and Kubernetes) and `forklift train --nproc` on
this host (`local`). It sits above `forklift.train` and apart from what a rank runs (`forklift.distributed`):
a rank imports nothing from here."""
