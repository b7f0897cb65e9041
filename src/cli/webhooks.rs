//! `reconcile --hooks-dir`'s webhook flags: shell-operator's own names, environment variables and
//! defaults, so that a Deployment made for shell-operator runs samplectl unchanged; and `--*-webhook-url`,
//! samplectl's, for a runner outside the cluster that the API server reaches by address, not by Service.

use std::path::PathBuf;

use clap::{Args, ValueHint};

use crate::controller::settings::{WebhookEndpoint, WebhookSettings};

#[derive(Debug, Args)]
pub struct WebhookArgs {
    /// The ValidatingWebhookConfiguration and MutatingWebhookConfiguration names, before `-hooks`
    #[arg(
        long,
        env = "VALIDATING_WEBHOOK_CONFIGURATION_NAME",
        default_value = "shell-operator-hooks",
        value_name = "NAME",
        help_heading = "shell-operator webhooks"
    )]
    pub validating_webhook_configuration_name: String,
    /// The Service in front of the admission webhooks, in the namespace of SHELL_OPERATOR_NAMESPACE
    #[arg(
        long,
        env = "VALIDATING_WEBHOOK_SERVICE_NAME",
        default_value = "shell-operator-validating-svc",
        value_name = "NAME",
        help_heading = "shell-operator webhooks"
    )]
    pub validating_webhook_service_name: String,
    /// Register the admission webhooks at this base URL (https://host:port) instead of the Service
    #[arg(long, env = "VALIDATING_WEBHOOK_URL", value_name = "URL", help_heading = "shell-operator webhooks")]
    pub validating_webhook_url: Option<String>,
    /// The admission server's certificate
    #[arg(long, env = "VALIDATING_WEBHOOK_SERVER_CERT", default_value = "/validating-certs/tls.crt",
          value_name = "FILE", value_hint = ValueHint::FilePath, help_heading = "shell-operator webhooks")]
    pub validating_webhook_server_cert: PathBuf,
    /// The admission server's private key (PKCS#1, PKCS#8 or SEC1 PEM)
    #[arg(long, env = "VALIDATING_WEBHOOK_SERVER_KEY", default_value = "/validating-certs/tls.key",
          value_name = "FILE", value_hint = ValueHint::FilePath, help_heading = "shell-operator webhooks")]
    pub validating_webhook_server_key: PathBuf,
    /// The CA the API server checks the admission server's certificate with (the caBundle registered)
    #[arg(long, env = "VALIDATING_WEBHOOK_CA", default_value = "/validating-certs/ca.crt",
          value_name = "FILE", value_hint = ValueHint::FilePath, help_heading = "shell-operator webhooks")]
    pub validating_webhook_ca: PathBuf,
    /// CAs of the client certificates the admission server then requires (repeatable; comma-separated
    /// in the variable)
    #[arg(long, env = "VALIDATING_WEBHOOK_CLIENT_CA", value_delimiter = ',', value_name = "FILE",
          value_hint = ValueHint::FilePath, help_heading = "shell-operator webhooks")]
    pub validating_webhook_client_ca: Vec<PathBuf>,
    #[arg(
        long,
        env = "VALIDATING_WEBHOOK_LISTEN_ADDRESS",
        default_value = "0.0.0.0",
        value_name = "ADDRESS",
        help_heading = "shell-operator webhooks"
    )]
    pub validating_webhook_listen_address: String,
    #[arg(
        long,
        env = "VALIDATING_WEBHOOK_LISTEN_PORT",
        default_value_t = 9680,
        value_name = "PORT",
        help_heading = "shell-operator webhooks"
    )]
    pub validating_webhook_listen_port: u16,

    /// The Service in front of the conversion webhooks, in the namespace of SHELL_OPERATOR_NAMESPACE
    #[arg(
        long,
        env = "CONVERSION_WEBHOOK_SERVICE_NAME",
        default_value = "shell-operator-conversion-svc",
        value_name = "NAME",
        help_heading = "shell-operator webhooks"
    )]
    pub conversion_webhook_service_name: String,
    /// Register the conversion webhooks at this base URL (https://host:port) instead of the Service
    #[arg(long, env = "CONVERSION_WEBHOOK_URL", value_name = "URL", help_heading = "shell-operator webhooks")]
    pub conversion_webhook_url: Option<String>,
    #[arg(long, env = "CONVERSION_WEBHOOK_SERVER_CERT", default_value = "/conversion-certs/tls.crt",
          value_name = "FILE", value_hint = ValueHint::FilePath, help_heading = "shell-operator webhooks")]
    pub conversion_webhook_server_cert: PathBuf,
    #[arg(long, env = "CONVERSION_WEBHOOK_SERVER_KEY", default_value = "/conversion-certs/tls.key",
          value_name = "FILE", value_hint = ValueHint::FilePath, help_heading = "shell-operator webhooks")]
    pub conversion_webhook_server_key: PathBuf,
    #[arg(long, env = "CONVERSION_WEBHOOK_CA", default_value = "/conversion-certs/ca.crt",
          value_name = "FILE", value_hint = ValueHint::FilePath, help_heading = "shell-operator webhooks")]
    pub conversion_webhook_ca: PathBuf,
    #[arg(long, env = "CONVERSION_WEBHOOK_CLIENT_CA", value_delimiter = ',', value_name = "FILE",
          value_hint = ValueHint::FilePath, help_heading = "shell-operator webhooks")]
    pub conversion_webhook_client_ca: Vec<PathBuf>,
    #[arg(
        long,
        env = "CONVERSION_WEBHOOK_LISTEN_ADDRESS",
        default_value = "0.0.0.0",
        value_name = "ADDRESS",
        help_heading = "shell-operator webhooks"
    )]
    pub conversion_webhook_listen_address: String,
    #[arg(
        long,
        env = "CONVERSION_WEBHOOK_LISTEN_PORT",
        default_value_t = 9681,
        value_name = "PORT",
        help_heading = "shell-operator webhooks"
    )]
    pub conversion_webhook_listen_port: u16,
}

impl WebhookArgs {
    /// The settings, with the Services in `namespace`.
    pub fn settings(&self, namespace: String) -> WebhookSettings {
        WebhookSettings {
            namespace,
            configuration_name: self.validating_webhook_configuration_name.clone(),
            admission: WebhookEndpoint {
                service: self.validating_webhook_service_name.clone(),
                url: self.validating_webhook_url.clone(),
                cert: self.validating_webhook_server_cert.clone(),
                key: self.validating_webhook_server_key.clone(),
                ca: self.validating_webhook_ca.clone(),
                client_cas: self.validating_webhook_client_ca.clone(),
                listen: (self.validating_webhook_listen_address.clone(), self.validating_webhook_listen_port),
            },
            conversion: WebhookEndpoint {
                service: self.conversion_webhook_service_name.clone(),
                url: self.conversion_webhook_url.clone(),
                cert: self.conversion_webhook_server_cert.clone(),
                key: self.conversion_webhook_server_key.clone(),
                ca: self.conversion_webhook_ca.clone(),
                client_cas: self.conversion_webhook_client_ca.clone(),
                listen: (self.conversion_webhook_listen_address.clone(), self.conversion_webhook_listen_port),
            },
        }
    }
}
