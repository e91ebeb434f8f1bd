"""``python -m shardwise.cli``: the same as the ``shardwise`` console command."""

import sys

from shardwise.cli.main import main

sys.exit(main())
