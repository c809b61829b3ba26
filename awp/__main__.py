from awp.cli.entry import main

raise SystemExit(main())
