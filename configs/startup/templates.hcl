# The cloud-init user-data every VM of this team starts with. The text is in
# templates/dev.yaml; it uses the built-in variables (user, hostname,
# ssh_authorized_keys, …) and the two declared here, which profiles may set.

template "dev" {
  description = "User account, SSH keys, the team's tools and dotfiles"
  file        = "templates/dev.yaml"
  vars = {
    packages = ["git", "tmux", "htop", "nvtop"]
    dotfiles = "https://git.example.com/team/dotfiles.git"
  }
}
