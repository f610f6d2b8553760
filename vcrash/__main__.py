def main() -> None:
    """The console script: the kept regex compiles first, so that every module's patterns use them."""
    from vcrash.re_cache import install

    install()
    from vcrash.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
