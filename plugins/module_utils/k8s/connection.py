# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the API is and how to authenticate: connection settings from the ``kubernetes``
library's own loaders.

Kubeconfig files merged as kubectl merges KUBECONFIG, contexts, exec credential plugins and
auth providers (their tokens renewed when they expire during a run), ``tls-server-name``,
``proxy-url``, client certificates, and the in-cluster service account. The requests
themselves are client.py's (transport.py sends them).

A kubeconfig whose user holds static credentials (a token or token file, client certificates,
a user name and password) is read without the library (``_static_kubeconfig``): importing its
loaders costs about 0.3 s of CPU in every module process (measured: ``kube_config`` pulls in
requests-oauthlib, pydantic, google-auth), and such credentials are only files and fields. The
library loads everything else - exec plugins and auth providers, whose tokens it renews, the
in-cluster account, and any kubeconfig the static reading finds unusual, so that its errors
keep their wording.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import atexit
import base64
import copy
import logging
import os
import shutil
import tempfile
import threading

from ansible_collections.kubevirt_ops.maintenance.plugins.module_utils.common.errors import ConfigurationError

IN_CLUSTER_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
DEFAULT_KUBECONFIG = "~/.kube/config"


class ConnectionSettings:
    """Resolved connection settings: where the API is and how to authenticate.

    ``credentials`` (a :class:`Credentials`) renews the Authorization header when its
    token expires (exec credential plugins, auth providers, the in-cluster token file);
    without it, ``token`` is sent as it is.
    """

    def __init__(self, host, token=None, ca_cert=None, client_cert=None, client_key=None,
                 verify=True, proxy=None, impersonate_user=None, impersonate_groups=None,
                 source=None, secrets=None, tls_server_name=None, credentials=None):
        self.host = host.rstrip("/")
        self.token = token
        self.ca_cert = ca_cert
        self.client_cert = client_cert
        self.client_key = client_key
        self.verify = verify
        self.proxy = proxy
        self.tls_server_name = tls_server_name
        self.impersonate_user = impersonate_user
        self.impersonate_groups = impersonate_groups or []
        self.source = source
        self.credentials = credentials
        # Values that must never appear in results or messages; grows when a token is renewed.
        self.secrets = [s for s in (secrets or []) if s]

    def add_secret(self, value):
        if value and value not in self.secrets:
            self.secrets.append(value)


_temp_dir = []


def _private_dir():
    """A private directory for the certificates and keys a kubeconfig holds inline, removed at exit."""
    if not _temp_dir:
        path = tempfile.mkdtemp(prefix="kubevirt-ops-")
        _temp_dir.append(path)
        atexit.register(shutil.rmtree, path, True)
    return _temp_dir[0]


class _LibraryLog(logging.Handler):
    """Collects what the kubernetes library logs while it loads or renews credentials.

    The library logs a failed exec credential plugin instead of raising; the message
    becomes the error the user sees, and nothing reaches the module's stderr.
    """

    def __init__(self):
        super(_LibraryLog, self).__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        if "kubernetes" in (record.pathname or ""):
            self.messages.append(record.getMessage())

    def __enter__(self):
        logging.getLogger().addHandler(self)
        return self

    def __exit__(self, *exc_info):
        logging.getLogger().removeHandler(self)


def _kubernetes_config():
    """The kubernetes library's configuration loaders (imported on first use)."""
    from kubernetes.client import Configuration
    from kubernetes.config import incluster_config, kube_config
    from kubernetes.config.config_exception import ConfigException

    return Configuration, kube_config, incluster_config, ConfigException


class Credentials:
    """The Authorization header of a kubeconfig user or a service account, kept fresh.

    ``load`` returns a ``kubernetes.client.Configuration`` filled by the library's loader.
    Reading the header goes through the library's ``refresh_api_key_hook``, which runs the
    exec plugin (or auth provider, or re-reads the service account token) again once the
    token is about to expire; :meth:`renew` loads from scratch, after the API server
    rejected the token. Thread-safe: the drain engine evicts from several threads.
    """

    def __init__(self, load, describe):
        self._load = load
        self._lock = threading.Lock()
        self.describe = describe
        self.configuration = load()

    def header(self):
        with self._lock:
            value = self._header()
            if _empty_bearer(value):
                # A plugin that read its token half-written hands out an empty one. Sent, it would make the
                # requests anonymous, refused as such (403) rather than renewed as a rejected token is: ask
                # once more, and fail in one sentence if it is still empty (as client-go does).
                self.configuration = self._load()
                value = self._header()
                if _empty_bearer(value):
                    raise ConfigurationError(
                        "The credentials of %s hold an empty token: its exec credential plugin (or auth provider) "
                        "returned none." % self.describe)
            return value

    def _header(self):
        with _LibraryLog() as log:
            auth = self.configuration.auth_settings().get("BearerToken") or {}
        if log.messages:
            raise ConfigurationError("Cannot renew the credentials of %s: %s." % (
                self.describe, "; ".join(m.strip().rstrip(".") for m in log.messages)))
        value = auth.get("value")
        return value.strip() if value else None

    def renew(self):
        with self._lock:
            self.configuration = self._load()


def _empty_bearer(header):
    """Whether an Authorization header value is a bearer token without the token."""
    return header is not None and header.lower() == "bearer"


def _check_file(path, what):
    if path and not os.path.isfile(os.path.expanduser(path)):
        raise ConfigurationError("The %s file %s does not exist." % (what, path))


def _read_secret_file(path, secrets):
    try:
        with open(os.path.expanduser(path), "rb") as handle:
            secrets.append(handle.read().decode("utf-8", "replace").strip())
    except (IOError, OSError):
        pass


def _token_of(header):
    """The secret part of an Authorization header value."""
    parts = (header or "").split(None, 1)
    return parts[1] if len(parts) == 2 else header


def _token_setting(header):
    """``ConnectionSettings.token`` from a header value: a bearer token bare, basic auth whole."""
    if header and header.lower().startswith("basic "):
        return header
    return _token_of(header)


def _sentence(text):
    return text[:1].upper() + text[1:]


def _value(node):
    """A kubeconfig entry as a plain value (the library wraps merged entries in ConfigNode)."""
    return getattr(node, "value", node)


def _entry(config, section, name, what, where):
    for item in _value(config).get(section) or []:
        item_value = _value(item)
        if isinstance(item_value, dict) and item_value.get("name") == name:
            return item_value.get(section[:-1]) or {}
    raise ConfigurationError("%s has no %s named '%s'." % (where, what, name))


def _absolute_paths(merged):
    """Relative paths of a merged kubeconfig, made absolute against the file that holds them.

    kubectl resolves them so; the library would resolve a user's certificate against the
    file of the cluster, which is another file when KUBECONFIG splits them.
    """
    fields = {"clusters": ("certificate-authority",), "users": ("client-certificate", "client-key", "tokenFile")}
    for section, keys in fields.items():
        for item in _value(merged).get(section) or []:
            base = getattr(item, "path", None)
            body = _value(item).get(section[:-1])
            if not base or not isinstance(body, dict):
                continue
            base = os.path.dirname(os.path.abspath(base))
            for key in keys:
                if body.get(key) and isinstance(body[key], str):
                    body[key] = os.path.join(base, os.path.expanduser(body[key]))
            command = (body.get("exec") or {}).get("command") if isinstance(body.get("exec"), dict) else None
            if command and os.sep in command and not os.path.isabs(command):
                body["exec"]["command"] = os.path.join(base, command)


def _diagnose(paths, exc):
    """The sentence for a kubeconfig file the library could not merge."""
    import yaml

    for path in paths:
        try:
            with open(path, "rb") as handle:
                data = yaml.safe_load(handle)
        except (IOError, OSError) as err:
            return "Cannot read kubeconfig %s: %s." % (path, err.strerror or err)
        except yaml.YAMLError as err:
            return "Kubeconfig %s is not valid YAML (%s)." % (path, str(err).splitlines()[0])
        if data is None:
            return "Kubeconfig %s is empty." % path
        if not isinstance(data, dict):
            return "Kubeconfig %s is not a kubeconfig: it holds no clusters, users or contexts." % path
    return "Kubeconfig %s cannot be read: %s." % (os.pathsep.join(paths), _short(exc))


def _merge_files(paths, kube_config):
    """KUBECONFIG semantics: the files merged in order, the first to name an entry wins."""
    paths = [p for p in paths if os.path.getsize(p) > 0]
    if not paths:
        return None
    try:
        merger = kube_config.KubeConfigMerger(kube_config.ENV_KUBECONFIG_PATH_SEPARATOR.join(paths))
    except Exception as exc:  # YAML errors, a file that is a list, duplicate names ...
        raise ConfigurationError(_diagnose(paths, exc)) from exc
    merged = merger.config
    if merged is None:
        return None
    # The first file that sets current-context wins (as kubectl merges).
    for path in merger.paths:
        current = (merger.config_files.get(path) or {}).get("current-context")
        if current:
            _value(merged)["current-context"] = current
            break
    _absolute_paths(merged)
    return merged


def _from_kubeconfig(config, context_name, where):
    """Settings of one context of a (merged) kubeconfig, loaded by the kubernetes library."""
    Configuration, kube_config, _incluster, _exc = _kubernetes_config()
    if not isinstance(_value(config), dict):
        raise ConfigurationError("%s is not a kubeconfig: it holds no clusters, users or contexts." % _sentence(where))
    context_name = context_name or _value(config).get("current-context")
    if not context_name:
        raise ConfigurationError("%s sets no current-context; give the 'context' option." % _sentence(where))
    context = _entry(config, "contexts", context_name, "Context", where)
    cluster = _entry(config, "clusters", context.get("cluster"), "Cluster", where)
    user = _entry(config, "users", context["user"], "User", where) if context.get("user") else {}
    if not cluster.get("server"):
        raise ConfigurationError("Cluster '%s' in %s has no server address." % (context.get("cluster"), where))
    describe = "user '%s' of %s" % (context.get("user"), where)

    def load():
        configuration = Configuration()
        with _LibraryLog() as log:
            try:
                loader = kube_config.KubeConfigLoader(
                    config_dict=config, active_context=context_name, config_base_path=None,
                    temp_file_path=_private_dir())
                loader.load_and_set(configuration)
            except Exception as exc:  # ConfigException, a missing file, an auth provider's own errors
                raise ConfigurationError("Cannot load the credentials of %s: %s." % (
                    describe, _short(exc).rstrip("."))) from exc
        if log.messages:
            raise ConfigurationError("Cannot load the credentials of %s: %s." % (
                describe, "; ".join(m.strip().rstrip(".") for m in log.messages)))
        return configuration

    credentials = Credentials(load, describe)
    configuration = credentials.configuration
    header = credentials.header()
    refreshable = bool(header) and bool(user.get("exec") or user.get("auth-provider"))
    return _context_settings(
        cluster, user, "%s (context %s)" % (where, context_name), header,
        host=configuration.host,
        ca_cert=getattr(configuration, "ssl_ca_cert", None),
        client_cert=getattr(configuration, "cert_file", None),
        client_key=getattr(configuration, "key_file", None),
        verify=bool(configuration.verify_ssl),
        # tls-server-name and proxy-url: read by the library from 27.2 on, by us before.
        proxy=getattr(configuration, "proxy", None),
        tls_server_name=getattr(configuration, "tls_server_name", None),
        credentials=credentials if refreshable else None,
    )


def _context_settings(cluster, user, source, header, host, ca_cert, client_cert, client_key, verify, proxy=None,
                      tls_server_name=None, credentials=None):
    """ConnectionSettings' fields of a kubeconfig context (its ``cluster`` and ``user`` entries), however its
    credentials were loaded: ``header``, the Authorization header, and the files and flags read; every secret
    the user holds (its header and token, password, auth provider tokens, client key) for redaction."""
    secrets = [header, _token_of(header), user.get("password"), user.get("token")]
    auth_provider = (user.get("auth-provider") or {}).get("config") or {}
    secrets.extend(auth_provider.get(k) for k in ("id-token", "refresh-token", "client-secret", "access-token"))
    if user.get("client-key-data"):
        try:
            secrets.append(base64.b64decode(user["client-key-data"]).decode("utf-8", "replace").strip())
        except (TypeError, ValueError):
            pass
    if client_key:
        _read_secret_file(client_key, secrets)
    return dict(
        host=host,
        token=_token_setting(header),
        ca_cert=ca_cert,
        client_cert=client_cert,
        client_key=client_key,
        verify=verify,
        proxy=proxy or cluster.get("proxy-url"),
        tls_server_name=tls_server_name or cluster.get("tls-server-name"),
        impersonate_user=user.get("as"),
        impersonate_groups=user.get("as-groups"),
        source=source,
        credentials=credentials,
        secrets=secrets,
    )


def _in_cluster():
    """The pod's service account, loaded by the kubernetes library (its token re-read every minute)."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    token_file = os.path.join(IN_CLUSTER_DIR, "token")
    if not host or not os.path.isfile(token_file):
        return None
    Configuration, _kube_config, incluster_config, ConfigException = _kubernetes_config()
    environ = dict(os.environ)
    environ.setdefault("KUBERNETES_SERVICE_PORT", "443")
    describe = "the in-cluster service account"

    def load():
        configuration = Configuration()
        try:
            incluster_config.InClusterConfigLoader(
                token_filename=token_file, cert_filename=os.path.join(IN_CLUSTER_DIR, "ca.crt"),
                environ=environ).load_and_set(configuration)
        except (ConfigException, IOError, OSError) as exc:
            raise ConfigurationError("Cannot use %s (%s): %s." % (describe, IN_CLUSTER_DIR, _short(exc).rstrip("."))) from exc
        return configuration

    credentials = Credentials(load, describe)
    header = credentials.header()
    return dict(host=credentials.configuration.host, token=_token_setting(header),
                ca_cert=credentials.configuration.ssl_ca_cert, source="in-cluster service account",
                credentials=credentials, secrets=[header, _token_of(header)])


def _kubeconfig_paths(value, explicit):
    """Files of a kubeconfig option or KUBECONFIG (a list separated like PATH)."""
    paths = [os.path.expanduser(p) for p in str(value).split(os.pathsep) if p]
    if explicit:
        for path, given in zip(paths, [p for p in str(value).split(os.pathsep) if p]):
            if not os.path.exists(path):
                raise ConfigurationError("Kubeconfig %s does not exist." % given)
    return [p for p in paths if os.path.exists(p)]


class _Unusual(Exception):
    """The static reading of a kubeconfig leaves it to the library (which words what is wrong)."""


def _merged_static(paths):
    """KUBECONFIG files merged as the library's KubeConfigMerger merges them (the first file to name a cluster,
    context or user wins; the first to set current-context, as kubectl), every cluster and user with the directory
    of its file (``_base``); _Unusual for anything but plain mappings and lists."""
    import yaml

    merged = {"clusters": [], "contexts": [], "users": []}
    current = None
    for path in paths:
        if os.path.getsize(path) == 0:
            continue
        try:
            with open(path, "rb") as handle:
                data = yaml.safe_load(handle)
        except (IOError, OSError, yaml.YAMLError):
            raise _Unusual()
        if not isinstance(data, dict):
            raise _Unusual()
        current = current or data.get("current-context")
        base = os.path.dirname(os.path.abspath(path))
        for section, items in merged.items():
            found = data.get(section) or []
            if not isinstance(found, list):
                raise _Unusual()
            for item in found:
                if not isinstance(item, dict) or not isinstance(item.get(section[:-1]) or {}, dict):
                    raise _Unusual()
                body = section[:-1]
                if all(item.get("name") != known.get("name") for known in items):
                    items.append(dict(item, **{body: dict(item.get(body) or {}, _base=base)}))
    if not any(merged.values()) and current is None:
        raise _Unusual()
    merged["current-context"] = current
    return merged


def _file_or_data(entry, key):
    """The file of ``key`` of a kubeconfig entry: its ``<key>-data`` (base64) written to a private file, else its
    path against the directory of the entry's file (``_base``, the library's FileOrData.as_file); None when neither
    is set."""
    if entry.get(key + "-data"):
        try:
            content = base64.b64decode(entry[key + "-data"], validate=True)
        except (TypeError, ValueError):
            raise _Unusual()
        handle, path = tempfile.mkstemp(dir=_private_dir())
        with os.fdopen(handle, "wb") as out:
            out.write(content)
        return path
    if entry.get(key):
        path = os.path.normpath(os.path.join(entry.get("_base", ""), os.path.expanduser(entry[key])))
        if not os.path.isfile(path):
            raise _Unusual()
        return path
    return None


def _static_header(user):
    """The Authorization header of a user with static credentials, chosen as the library chooses (a token, or the
    content of its tokenFile, before a user name and password); None without credentials."""
    token = user.get("token")
    if not token and user.get("tokenFile"):
        try:
            with open(os.path.normpath(os.path.join(user.get("_base", ""), os.path.expanduser(user["tokenFile"])))) as handle:
                token = handle.read()
        except (IOError, OSError):
            raise _Unusual()
    if token:
        return ("Bearer %s" % token).strip()
    if "username" in user and "password" in user:
        basic = base64.b64encode(("%s:%s" % (user["username"], user["password"])).encode("utf-8")).decode("ascii")
        return "Basic %s" % basic
    return None


def _static_kubeconfig(paths, context_name):
    """The settings of the context of KUBECONFIG files whose user holds static credentials, read as the library's
    KubeConfigLoader reads them, without importing it; None when the library must load them (see the module's
    docstring)."""
    where = "kubeconfig %s" % os.pathsep.join(paths)
    try:
        config = _merged_static(paths)
    except _Unusual:
        return None
    context_name = context_name or config.get("current-context")
    if not context_name:
        return None
    try:
        context = _entry(config, "contexts", context_name, "Context", where)
        cluster = _entry(config, "clusters", context.get("cluster"), "Cluster", where)
        user = _entry(config, "users", context["user"], "User", where) if context.get("user") else {}
    except (ConfigurationError, KeyError):
        return None
    if user.get("exec") or user.get("auth-provider") or not cluster.get("server"):
        return None
    host = str(cluster["server"]).rstrip("/")
    try:
        header = _static_header(user)
        ca_cert = client_cert = client_key = None
        if host.startswith("https"):
            ca_cert = _file_or_data(cluster, "certificate-authority")
            client_cert = _file_or_data(user, "client-certificate")
            client_key = _file_or_data(user, "client-key")
    except _Unusual:
        return None
    return _context_settings(
        cluster, user, "%s (context %s)" % (where, context_name), header, host=host, ca_cert=ca_cert,
        client_cert=client_cert, client_key=client_key,
        verify=not cluster["insecure-skip-tls-verify"] if "insecure-skip-tls-verify" in cluster else True)


def _load_files(paths, context):
    where = "kubeconfig %s" % os.pathsep.join(paths)
    static = _static_kubeconfig(paths, context)
    if static is not None:
        return static
    _configuration, kube_config, _incluster, _exc = _kubernetes_config()
    merged = _merge_files(paths, kube_config)
    if merged is None:
        raise ConfigurationError("Kubeconfig %s holds no configuration." % os.pathsep.join(paths))
    return _from_kubeconfig(merged, context, where)


def resolve_settings(params):
    """Auth options (kubernetes.core names, env fallbacks already applied) -> settings.

    Order: an explicit ``kubeconfig`` (or KUBECONFIG / ~/.kube/config when ``host`` is not
    given) is the base; explicit options override its fields; with no kubeconfig and no
    host, the in-cluster service account is used. Several files (``a:b``) are merged as
    kubectl merges KUBECONFIG.
    """
    params = params or {}
    kubeconfig = params.get("kubeconfig")
    base = None
    if isinstance(kubeconfig, dict):
        base = _from_kubeconfig(copy.deepcopy(kubeconfig), params.get("context"), "the kubeconfig given")
    elif kubeconfig:
        base = _load_files(_kubeconfig_paths(kubeconfig, explicit=True), params.get("context"))
    elif not params.get("host"):
        env_paths = _kubeconfig_paths(os.environ.get("KUBECONFIG", ""), explicit=False)
        default = os.path.expanduser(DEFAULT_KUBECONFIG)
        if not os.environ.get("KUBECONFIG"):
            base = _in_cluster()
            env_paths = [default] if base is None and os.path.exists(default) else []
        if base is None and env_paths:
            base = _load_files(env_paths, params.get("context"))
        if base is None:
            base = _in_cluster()
        if base is None:
            raise ConfigurationError(
                "No cluster to connect to: give 'kubeconfig' or 'host' (or K8S_AUTH_KUBECONFIG / KUBECONFIG), "
                "or run inside a pod with a service account.")
    settings = dict(base or {})
    secrets = list(settings.pop("secrets", []))
    overrides = {
        "host": params.get("host"),
        "token": params.get("api_key"),
        "ca_cert": params.get("ca_cert"),
        "client_cert": params.get("client_cert"),
        "client_key": params.get("client_key"),
        "proxy": params.get("proxy"),
        "impersonate_user": params.get("impersonate_user"),
        "impersonate_groups": params.get("impersonate_groups"),
    }
    for key, value in overrides.items():
        if value:
            settings[key] = value
    if params.get("validate_certs") is not None:
        settings["verify"] = bool(params["validate_certs"])
    if not settings.get("host"):
        raise ConfigurationError("No API server address: give 'host' or a kubeconfig whose cluster has a server.")
    if params.get("api_key"):
        # An explicit token replaces whatever the kubeconfig authenticates with.
        settings["credentials"] = None
        secrets.append(params["api_key"])
        settings.setdefault("source", "host %s" % settings["host"])
    _check_file(settings.get("ca_cert"), "ca cert")
    _check_file(settings.get("client_cert"), "client cert")
    _check_file(settings.get("client_key"), "client key")
    if params.get("client_key"):
        _read_secret_file(params["client_key"], secrets)
    settings["secrets"] = secrets
    return ConnectionSettings(**settings)


def _short(exc):
    text = str(exc)
    return text if len(text) < 200 else text[:200] + "..."
