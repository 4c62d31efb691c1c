"""The command-line programs: `job` (the user's CLI) and `jobd` (the servers)."""
