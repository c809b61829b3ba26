from awp.cli.entry import program

program()
