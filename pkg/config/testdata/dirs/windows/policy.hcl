# The week of a startup: interactive by day, batch at night and at weekends.
# "night" starts on Friday evening too, so it overlaps the weekend.
policy {
  timezone = "Europe/Berlin"

  window "day" {
    days    = "mon-fri"
    hours   = "09:00-18:00"
    classes = ["interactive"]
    at_end  = "warn"
  }
  window "night" {
    days    = "mon-fri"
    hours   = "18:00-09:00"
    classes = ["batch"]
    at_end  = "stop"
  }
  window "weekend" {
    from    = "fri 18:00"
    to      = "mon 09:00"
    classes = ["batch"]
  }
  window "lunch" {
    days    = "daily"
    hours   = "12:00-13:00"
    classes = ["interactive", "batch"]
  }
}
