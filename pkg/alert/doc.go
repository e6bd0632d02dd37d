// Package alert evaluates the policy's alert rules after each monitoring
// round (it is a monitor.RoundObserver): GPU metrics from the round and the
// samples, the queue, idle VMs and backend health. A rule fires once its
// condition has held for its duration and resolves as soon as it stops;
// every change is logged, stored and sent to the rule's webhook
// (pkg/webhook).
package alert
