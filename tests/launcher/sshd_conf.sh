# Sourced by the tests that start their own OpenSSH server (ssh_test.sh, the emulated cluster):
# sshd_conf PORT ADDRESS DIR PIDFILE prints an sshd_config listening on ADDRESS:PORT with the
# host key and authorized keys in DIR (host_key, authorized_keys): public keys only, root may log
# in, no PAM, no strict modes (the keys live in a temp folder).
sshd_conf() {
  cat <<CONF
Port $1
ListenAddress $2
HostKey $3/host_key
AuthorizedKeysFile $3/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
PidFile $4
CONF
}
