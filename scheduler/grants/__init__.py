"""How a lease becomes access on a cluster: grants issued through Slurm, and a private local
Slurm cluster for the demo and the tests. No Django."""
