server {
  monitor {
    idle_threshold = 7.5
  }
}
