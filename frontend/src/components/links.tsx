// Mantine's anchor and button as router links, typed against the routes.
import { Anchor, type AnchorProps, Button, type ButtonProps } from "@mantine/core";
import { createLink } from "@tanstack/react-router";
import type { ComponentPropsWithRef } from "react";

const AnchorElement = (props: AnchorProps & ComponentPropsWithRef<"a">) => <Anchor component="a" {...props} />;
const ButtonElement = (props: ButtonProps & ComponentPropsWithRef<"a">) => <Button component="a" {...props} />;

export const AnchorLink = createLink(AnchorElement);
export const ButtonLink = createLink(ButtonElement);
