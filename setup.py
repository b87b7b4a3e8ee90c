"""What setup.cfg cannot say: the repository's top-level migrations/ ships inside the package as
`wa_outbox._migrations`, so an installed wheel migrates without a checkout, and no top-level `migrations` package
(which would shadow an app's own) is ever installed. Its data files are listed in setup.cfg's package_data."""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["wa_outbox", "wa_outbox.*"]) + ["wa_outbox._migrations"],
    package_dir={"wa_outbox._migrations": "migrations"},
)
