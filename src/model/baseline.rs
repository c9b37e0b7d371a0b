//! Pod Security's baseline profile, as Kubernetes v1.36 checks it (the pod-security-admission
//! `policy` package): a requeue copy may exceed none of its controls (admission refuses it,
//! `manifests/admission/validatingadmissionpolicy.yaml`), unless its namespace opted in to
//! copies beyond baseline. The lists below are the standard's own; the admission policy
//! names the same values (a test keeps the two in step).

/// A control of the baseline profile, in the standard's order. `Pod::beyond_baseline` is
/// the first one a pod's spec exceeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BaselineControl {
    /// `securityContext.windowsOptions.hostProcess: true` (pod or container).
    HostProcess,
    /// `hostNetwork`, `hostPID` or `hostIPC`.
    HostNamespaces,
    /// A privileged container.
    Privileged,
    /// A capability added beyond [`ALLOWED_CAPABILITIES`].
    Capabilities,
    /// A `hostPath` volume.
    HostPathVolumes,
    /// A container port with a `hostPort`.
    HostPorts,
    /// An AppArmor profile other than RuntimeDefault or Localhost (field or annotation).
    AppArmor,
    /// An SELinux type outside [`ALLOWED_SELINUX_TYPES`], or an SELinux user or role.
    SeLinux,
    /// A `procMount` other than Default, outside a user namespace (`hostUsers: false`).
    ProcMount,
    /// A seccomp profile other than RuntimeDefault or Localhost (Unconfined).
    Seccomp,
    /// A sysctl outside [`SAFE_SYSCTLS`].
    Sysctls,
    /// A probe or lifecycle handler (httpGet, tcpSocket) aimed at another host.
    ProbeOrLifecycleHost,
}

impl BaselineControl {
    /// Every control, in the standard's order.
    pub const ALL: [BaselineControl; 12] = [
        BaselineControl::HostProcess,
        BaselineControl::HostNamespaces,
        BaselineControl::Privileged,
        BaselineControl::Capabilities,
        BaselineControl::HostPathVolumes,
        BaselineControl::HostPorts,
        BaselineControl::AppArmor,
        BaselineControl::SeLinux,
        BaselineControl::ProcMount,
        BaselineControl::Seccomp,
        BaselineControl::Sysctls,
        BaselineControl::ProbeOrLifecycleHost,
    ];

    /// The check's ID in pod-security-admission (what its refusals name).
    pub fn id(self) -> &'static str {
        match self {
            BaselineControl::HostProcess => "windowsHostProcess",
            BaselineControl::HostNamespaces => "hostNamespaces",
            BaselineControl::Privileged => "privileged",
            BaselineControl::Capabilities => "capabilities_baseline",
            BaselineControl::HostPathVolumes => "hostPathVolumes",
            BaselineControl::HostPorts => "hostPorts",
            BaselineControl::AppArmor => "appArmorProfile",
            BaselineControl::SeLinux => "seLinuxOptions",
            BaselineControl::ProcMount => "procMount",
            BaselineControl::Seccomp => "seccompProfile_baseline",
            BaselineControl::Sysctls => "sysctls",
            BaselineControl::ProbeOrLifecycleHost => "hostProbesAndHostLifecycle",
        }
    }

    /// What the pod asks for, as a person reads it.
    pub fn describe(self) -> &'static str {
        match self {
            BaselineControl::HostProcess => "a Windows HostProcess container",
            BaselineControl::HostNamespaces => "the host's namespaces (hostNetwork, hostPID or hostIPC)",
            BaselineControl::Privileged => "a privileged container",
            BaselineControl::Capabilities => "capabilities beyond the default set",
            BaselineControl::HostPathVolumes => "a hostPath volume",
            BaselineControl::HostPorts => "a hostPort",
            BaselineControl::AppArmor => "an AppArmor profile other than RuntimeDefault or Localhost",
            BaselineControl::SeLinux => "an SELinux type, user or role baseline forbids",
            BaselineControl::ProcMount => "an unmasked /proc (procMount) outside a user namespace",
            BaselineControl::Seccomp => "a seccomp profile other than RuntimeDefault or Localhost",
            BaselineControl::Sysctls => "an unsafe sysctl",
            BaselineControl::ProbeOrLifecycleHost => "a probe or lifecycle handler aimed at another host",
        }
    }
}

/// Capabilities a container may add under baseline (the container runtime's default set).
pub const ALLOWED_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// SELinux types baseline allows (the empty type is unset); user and role must be unset.
pub const ALLOWED_SELINUX_TYPES: [&str; 5] =
    ["", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"];

/// The sysctls baseline calls safe: namespaced, and isolated from other pods of the node.
pub const SAFE_SYSCTLS: [&str; 12] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
];

/// Seccomp and AppArmor profile types baseline allows where one is set.
pub const ALLOWED_PROFILE_TYPES: [&str; 2] = ["RuntimeDefault", "Localhost"];

/// The deprecated per-container AppArmor annotation (still synced to the field at create).
pub const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

/// Does baseline allow this value of the AppArmor annotation?
pub fn apparmor_annotation_allowed(value: &str) -> bool {
    value.is_empty() || value == "runtime/default" || value.starts_with("localhost/")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The admission policy holds a copy to the same lists, by value.
    #[test]
    fn the_admission_policy_names_the_same_lists() {
        let policy = include_str!("../../manifests/admission/validatingadmissionpolicy.yaml");
        let quoted = |xs: &[&str]| xs.iter().map(|x| format!("'{x}'")).collect::<Vec<_>>().join(", ");
        for list in [
            quoted(&ALLOWED_CAPABILITIES),
            quoted(&ALLOWED_SELINUX_TYPES),
            quoted(&ALLOWED_PROFILE_TYPES),
            quoted(&SAFE_SYSCTLS),
        ] {
            assert!(policy.contains(&list), "the policy lists [{list}]");
        }
        assert!(policy.contains(APPARMOR_ANNOTATION_PREFIX));
    }

    #[test]
    fn the_apparmor_annotation_allows_the_runtime_default_and_local_profiles_only() {
        for ok in ["", "runtime/default", "localhost/k8s-apparmor-example"] {
            assert!(apparmor_annotation_allowed(ok), "{ok}");
        }
        for bad in ["unconfined", "anything"] {
            assert!(!apparmor_annotation_allowed(bad), "{bad}");
        }
    }
}
