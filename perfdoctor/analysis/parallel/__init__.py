"""Data-parallel structure read from one rank's trace: gradient accumulation, sharded (FSDP / ZeRO) units."""
