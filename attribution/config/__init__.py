"""Settings: the configuration file (`load`), its sections as frozen pydantic dataclasses (`sections`),
environment overrides, and credentials read from root-only files (`attribution.secrets`).

A database password is never in the file or on a command line: it comes from `database.password_file`, which
must not be readable by group or others. Every problem with the file is one line `file:line: setting problem`.
The node agent reads its part of these settings from its cache (`node.settings`) and loads this package (and
pydantic) only when the configuration changed.
"""

from attribution.config.load import (SYSTEM_CONFIG, load_settings, parse_connectors, parse_settings, problems_of,
                                     user_config)
from attribution.config.sections import (FILE_SOURCES, ConnectorSettings, DatabaseSettings, EpilogSettings,
                                         FileSourceSettings, HttpAuthSettings, JobActionSettings, KubernetesSettings,
                                         KueueWatchSettings, LokiSettings, PrometheusSettings, ServiceSettings,
                                         Settings, SlurmCommandSettings, SlurmrestdSettings, WatchSettings,
                                         default_home)
# read_secret lives in attribution.secrets (the node agent reads its token without importing this package)
from attribution.secrets import read_secret

__all__ = ["SYSTEM_CONFIG", "FILE_SOURCES", "load_settings", "parse_settings", "parse_connectors", "problems_of",
           "user_config", "default_home", "read_secret", "Settings", "DatabaseSettings", "EpilogSettings",
           "ServiceSettings", "ConnectorSettings", "HttpAuthSettings", "LokiSettings", "PrometheusSettings",
           "KubernetesSettings", "SlurmCommandSettings", "SlurmrestdSettings", "FileSourceSettings",
           "KueueWatchSettings", "WatchSettings", "JobActionSettings"]
