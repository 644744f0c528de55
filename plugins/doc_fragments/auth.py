# -*- coding: utf-8 -*-
# Copyright: kubevirt_ops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    # Paired with module_utils/ansible_module/args.py AUTH; names and environment variables are kubernetes.core's.
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to a kubeconfig file, or the kubeconfig itself as a dictionary.
      - Several paths separated by C(:) are merged as kubectl merges C(KUBECONFIG) (the first file to name an
        entry wins).
      - When neither O(kubeconfig) nor O(host) is given, C(KUBECONFIG) or C(~/.kube/config) is used,
        and inside a pod its service account.
      - Read by the C(kubernetes) library; C(tls-server-name), C(proxy-url), client certificates, exec
        credential plugins and auth providers are honoured, and a token that expires during the run is renewed.
      - Environment variable E(K8S_AUTH_KUBECONFIG).
    type: raw
  context:
    description:
      - The kubeconfig context to use instead of its current context.
      - Environment variable E(K8S_AUTH_CONTEXT).
    type: str
  host:
    description:
      - URL of the Kubernetes API server. Overrides the kubeconfig's server.
      - Environment variable E(K8S_AUTH_HOST).
    type: str
  api_key:
    description:
      - Bearer token to authenticate with. Never logged or returned.
      - Environment variable E(K8S_AUTH_API_KEY).
    type: str
  validate_certs:
    description:
      - Whether to verify the API server's TLS certificate.
      - Environment variable E(K8S_AUTH_VERIFY_SSL).
    type: bool
    aliases: [verify_ssl]
  ca_cert:
    description:
      - Path to a CA certificate to verify the API server with.
      - Environment variable E(K8S_AUTH_SSL_CA_CERT).
    type: path
    aliases: [ssl_ca_cert]
  client_cert:
    description:
      - Path to a client certificate for authentication.
      - Environment variable E(K8S_AUTH_CERT_FILE).
    type: path
    aliases: [cert_file]
  client_key:
    description:
      - Path to the client certificate's private key. Its content never reaches a result or a log.
      - Environment variable E(K8S_AUTH_KEY_FILE).
    type: path
    aliases: [key_file]
  proxy:
    description:
      - HTTP(S) proxy URL to reach the API server through.
      - Environment variable E(K8S_AUTH_PROXY).
    type: str
  impersonate_user:
    description:
      - User to impersonate for every request.
      - Environment variable E(K8S_AUTH_IMPERSONATE_USER).
    type: str
  impersonate_groups:
    description:
      - Groups to impersonate for every request.
      - Environment variable E(K8S_AUTH_IMPERSONATE_GROUPS) (comma separated).
    type: list
    elements: str
requirements:
  - python >= 3.9
  - kubernetes >= 24.2.0 (brings urllib3 and PyYAML)
notes:
  - The kubernetes library loads the credentials of exec plugins and auth providers (renewing their tokens when they
    expire) and of the in-cluster service account. A kubeconfig user with static credentials (a token or token file,
    client certificates, a user name and password) is read as that library reads it, without loading it, which keeps
    a module's start about 0.3 s shorter.
  - Requests carry the user agent C(kubevirt_ops.maintenance/<version>) and are retried with backoff on
    connection errors, HTTP 5xx and HTTP 429 (except evictions, where 429 is an answer).
"""
