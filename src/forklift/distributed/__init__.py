"""What a rank of a data-parallel run does on torch.distributed: find its rank, place and device (`ranks`,
`places`), pin itself before the command starts (`pinned`), and keep batch norm over all ranks (`sync_batchnorm`).
Starting the ranks is `forklift.launcher`'s."""
