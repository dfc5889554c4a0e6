"""`python -m tickwork`: the `tickwork` command, from whatever directory it runs in."""

if __name__ == "__main__":
    from .home import drop_cwd_entry

    drop_cwd_entry()
    from .cli import main

    main()
