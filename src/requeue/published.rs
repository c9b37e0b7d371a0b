//! The extender's side of the requeue controller's Lease (`lease`): `serve --requeue`
//! reads it every few seconds and tells decisions (`Availability`) whether a bare victim
//! will come back. Reading is all the extender does of requeue: it creates, releases and
//! deletes no pod.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};

use super::availability::Availability;
use super::lease;

/// Reads the Lease `namespace/name` until the process ends.
pub async fn follow(client: Client, namespace: String, name: String, availability: Arc<Availability>) {
    let api: Api<Lease> = Api::namespaced(client, &namespace);
    availability.set(false, Some(format!("the requeue controller's Lease {namespace}/{name} is not read yet")));
    loop {
        let now = crate::clock::system_now();
        let found = match api.get_opt(&name).await {
            Ok(found) => lease::copies_possible(found.as_ref().map(super::leader::state_of).as_ref(), now),
            Err(e) => Err(format!("cannot read the requeue controller's Lease {namespace}/{name}: {e}")),
        };
        let why_not = found.err();
        if availability.set(why_not.is_none(), why_not.clone()) {
            match why_not {
                None => tracing::info!("requeue: the requeue controller stores copies: bare victims of requeue classes come back"),
                Some(why) => tracing::warn!(why,
                    "requeue: until the requeue controller stores copies, bare pods of requeue classes are victims of last resort (taken only for an online pod nothing else places, and lost)"),
            }
        }
        tokio::time::sleep(Duration::from_secs(lease::RENEW_EVERY_SECS)).await;
    }
}
