// Mantine's anchor and button as router links, typed against the routes.
import { Anchor, type AnchorProps, Button, type ButtonProps, Text } from "@mantine/core";
import { createLink } from "@tanstack/react-router";
import type { ComponentPropsWithRef } from "react";
import { shortId } from "../lib/format";

const AnchorElement = (props: AnchorProps & ComponentPropsWithRef<"a">) => <Anchor component="a" {...props} />;
const ButtonElement = (props: ButtonProps & ComponentPropsWithRef<"a">) => <Button component="a" {...props} />;

export const AnchorLink = createLink(AnchorElement);
export const ButtonLink = createLink(ButtonElement);

/** An order by its name, linked, over the distinctive part of its id. */
export function OrderName({ order }: { order: { id: string; org_id: string; name: string } }) {
  return (
    <>
      <AnchorLink to="/orgs/$orgId/orders/$orderId" params={{ orgId: order.org_id, orderId: order.id }} size="sm" fw={500}>
        {order.name}
      </AnchorLink>
      <Text size="xs" c="dimmed" ff="monospace">
        {shortId(order.id)}
      </Text>
    </>
  );
}
