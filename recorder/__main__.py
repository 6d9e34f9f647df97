from forge_record.cli import main

main()
