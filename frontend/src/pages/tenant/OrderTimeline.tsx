// The order's timeline: ordered, each placement (a move names the nodes it
// left), start, stop with its reason, requeue, and its end.
import { Text, Timeline } from "@mantine/core";
import type { Order } from "../../api/orders";
import { settled } from "../../api/orders";
import { useAttempts } from "../../api/jobs";
import { dateTime, words } from "../../lib/format";
import { type TimelineEvent, timelineOf } from "../../lib/timeline";
import { t } from "../../i18n";

function describe(event: TimelineEvent): { title: string; detail?: string } {
  switch (event.kind) {
    case "ordered":
      return { title: t("timeline.ordered") };
    case "placed":
      return event.from
        ? { title: t("timeline.moved", { nodes: event.nodes.join(", "), from: event.from.join(", ") }), detail: t("timeline.movedHint") }
        : { title: t("timeline.placed", { nodes: event.nodes.join(", ") }) };
    case "started":
      return { title: t("timeline.started") };
    case "stopping":
      return {
        title: t("timeline.stopping"),
        detail: t(`timeline.cause.${event.cause}`, { nodes: event.nodes.join(", ") }),
      };
    case "stopped": {
      const why = event.cause
        ? t(`timeline.cause.${event.cause}`, { nodes: event.nodes.join(", ") })
        : words(event.outcome ?? "released");
      const code = event.exitCode === null ? "" : ` ${t("timeline.exitCode", { code: event.exitCode })}`;
      return { title: t("timeline.stopped"), detail: `${why}${code}` };
    }
    case "requeued":
      return { title: t("timeline.requeued"), detail: t("timeline.requeuedHint") };
    case "ended":
      return { title: t("timeline.ended", { status: words(event.status) }) };
  }
}

export function OrderTimeline({ orgId, order }: { orgId: string; order: Order }) {
  const attempts = useAttempts(orgId, order.id, !settled(order), `${order.status}-${order.attempts}-${order.updated_at}`);
  const events = timelineOf(order, order.attempts > 0 ? (attempts.data ?? []) : []);
  return (
    <Timeline bulletSize={14} lineWidth={2} active={events.length - 1} data-testid="order-timeline">
      {events.map((event, i) => {
        const { title, detail } = describe(event);
        return (
          // Events have no id; their order is the order's history.
          <Timeline.Item key={`${event.kind}-${i}`} title={title} data-testid={`timeline-${event.kind}`}>
            {detail && <Text size="sm">{detail}</Text>}
            <Text size="xs" c="dimmed">
              {event.at ? dateTime(event.at) : "—"}
            </Text>
          </Timeline.Item>
        );
      })}
    </Timeline>
  );
}
